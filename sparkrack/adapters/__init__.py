"""Edges where sparkrack meets another program's plugin interface (Ansible's Jinja filters)."""

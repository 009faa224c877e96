"""Observability of what sparkrack deploys: the metric names the engines and exporters export
(:mod:`.metrics`), how Prometheus finds and labels them (:mod:`.scrape`), alert and recording
rules (:mod:`.rules`) and Grafana dashboards (:mod:`.dashboards`). ``python -m sparkrack.observe``
writes the shipped files under ``sparkrack/data/observe/``."""

import sys

from sparkrack.cli import main

sys.exit(main())

import sys

from lmswitch.cli import main

sys.exit(main())

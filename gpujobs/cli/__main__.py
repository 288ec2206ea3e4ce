import sys

from gpujobs.cli.main import main

sys.exit(main())

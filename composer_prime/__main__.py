import sys

from composer_prime.cli import main

sys.exit(main())

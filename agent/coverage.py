"""`python -m agent.coverage`: the coverage benchmark (see agent/search/coverage.py, where it lives)."""

import sys

from agent.search.coverage import main

if __name__ == "__main__":
    sys.exit(main())

import sys

from agent.search.peers.bench import main

sys.exit(main())

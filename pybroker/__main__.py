from pybroker.cli.main import main

raise SystemExit(main())

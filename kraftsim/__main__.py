"""``python -m kraftsim`` is the ``kraftsim`` console script."""

from kraftsim.cli.main import main

raise SystemExit(main())

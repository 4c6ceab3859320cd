"""``python -m kraftsim`` is the ``kraftsim`` console script."""

from kraftsim.controller.cli import main

raise SystemExit(main())

"""``python -m app.reference``: write the generated reference pages (``--check``: compare only)."""

import sys

from app.reference import main

sys.exit(main())

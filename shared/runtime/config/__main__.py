"""`python -m shared.runtime.config --docs` writes docs/configuration.md; without it, prints the page."""

from __future__ import annotations

import sys

from shared.runtime.config.docs import docs_page, write_docs

if "--docs" in sys.argv:
    write_docs()
else:
    print(docs_page())

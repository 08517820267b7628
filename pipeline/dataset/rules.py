"""Every metadata rule prep checks, classified against what each reader generation does with it.

`CHECK_SEVERITY[check][reader]` is the reader's behaviour as a severity (`pipeline.verdicts`): "error" (refuses
at open or raises at a sample), "warning" (inconsistent, loading unaffected), None (never read). Checks not in
the table are treated the same by every reader of a format line (their severity is the one found).
"""

from __future__ import annotations

CHECK_SEVERITY: dict[str, dict[str, str | None]] = {}

"""Broken: usage is never written to the usage log."""

FAILS = {"usage"}
PATCHES = [('    path = os.environ.get("USAGE_LOG")\n', "    path = None  # not wired up yet\n")]

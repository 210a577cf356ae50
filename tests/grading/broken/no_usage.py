"""Broken: usage is never written to the usage log (nor, so, a stopped or abandoned resumable
answer's ``cancelled`` line)."""

FAILS = {"usage", "resume_stop", "resume_grace"}
PATCHES = [('    path = os.environ.get("USAGE_LOG")\n', "    path = None  # not wired up yet\n")]

#!/usr/bin/env bash
# Gradescope runs this once, as root, while it builds the autograder's image (Ubuntu 22.04 or
# 24.04 base images), from the folder the autograder zip was unpacked into.
# It installs a Python >= 3.11 (22.04's default is 3.10), bubblewrap where the image allows it,
# and the grader with the lab's pinned packages into $AUTOGRADER_ROOT/venv.
set -euo pipefail
ROOT="${AUTOGRADER_ROOT:-/autograder}"
SOURCE="$(cd "$(dirname "$0")" && pwd)"

usable() {  # a Python >= 3.11 that can make a virtual environment with pip in it
  "$1" -c 'import sys, ensurepip, venv; sys.exit(sys.version_info < (3, 11))' 2>/dev/null
}
find_python() {
  for candidate in python3.13 python3.12 python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1 && usable "$candidate"; then
      command -v "$candidate"; return 0
    fi
  done
  return 1
}
apt_install() {
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"
  else
    return 1
  fi
}

if ! PYTHON="$(find_python)"; then
  echo "setup.sh: no Python >= 3.11 with venv here; installing one with apt-get"
  # Ubuntu 22.04: python3.11 is in universe; 24.04: its python3 is 3.12 and needs its venv.
  apt_install python3.11 python3.11-venv || apt_install python3-venv || true
  PYTHON="$(find_python)" || {
    echo "setup.sh: could not install Python >= 3.11. Use a newer Gradescope base image" \
         "(Ubuntu 22.04 or 24.04) or install python3.11 in this script."
    exit 1
  }
fi
echo "setup.sh: using $PYTHON ($("$PYTHON" --version))"

# bubblewrap sandboxes the learner's code where the container lets it; where it cannot,
# the grader says so and the container itself is the sandbox for the one submission.
command -v bwrap >/dev/null 2>&1 || apt_install bubblewrap || echo "setup.sh: no bubblewrap"

"$PYTHON" -m venv "$ROOT/venv"
"$ROOT/venv/bin/python" -m pip install --quiet --upgrade pip
# the locked versions (the lessons' pinned behaviour), then the grader without resolving again
"$ROOT/venv/bin/python" -m pip install --quiet -r "$SOURCE/requirements.txt"
"$ROOT/venv/bin/python" -m pip install --quiet --no-deps "$SOURCE/grader"
# What the grader will find here, for the build log: its sandbox and the CPU it may use.
"$ROOT/venv/bin/python" -c 'from labkit.checks import machine
from labkit.grading.isolation import choose
print("setup.sh: learner code will run in:", choose().describe())
print("setup.sh: machine:", machine.describe())'

echo "setup.sh: done"

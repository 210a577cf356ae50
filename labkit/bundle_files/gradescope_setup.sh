#!/usr/bin/env bash
# Gradescope runs this once, as root, while it builds the autograder's image, from the folder
# the autograder zip was unpacked into. Gradescope's base image is Ubuntu 22.04: its python3 is
# 3.10, and its own python3.11 package is a 3.11.0 release candidate, so this script installs
# neither. It installs, into $AUTOGRADER_ROOT:
#   uv/       uv from PyPI (pinned), with the image's python3 and pip
#   python/   a released CPython 3.11 that uv manages (`uv python install`)
#   venv/     the grader's lock (requirements.txt: no JupyterLab) and the grader, --no-deps
# and bubblewrap where the image allows it.
set -euo pipefail
ROOT="${AUTOGRADER_ROOT:-/autograder}"
SOURCE="$(cd "$(dirname "$0")" && pwd)"
UV_VERSION="0.13.8"
PYTHON_SERIES="3.11"

apt_install() {
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"
  else
    return 1
  fi
}

# 1. uv, from PyPI. Any python3 with pip can install it (the base image's 3.10 does).
if ! python3 -m pip --version >/dev/null 2>&1; then
  echo "setup.sh: python3 has no pip; installing python3-pip with apt-get"
  apt_install python3-pip || {
    echo "setup.sh: could not install pip for python3, which installs uv. Add python3-pip" \
         "to the image (Gradescope's Ubuntu 22.04 base has apt-get), then build it again."
    exit 1
  }
fi
rm -rf "$ROOT/uv"
python3 -m pip install --quiet --disable-pip-version-check --target "$ROOT/uv" "uv==$UV_VERSION"
UV="$ROOT/uv/bin/uv"

# 2. A released CPython 3.11 managed by uv; --managed-python never takes the distro's, and
# --no-bin puts no python3.11 on the image's PATH (~/.local/bin).
export UV_PYTHON_INSTALL_DIR="$ROOT/python"
"$UV" python install --no-bin "$PYTHON_SERIES" || {
  echo "setup.sh: uv could not install Python $PYTHON_SERIES (uv python install downloads it" \
       "from GitHub's python-build-standalone releases). Check the image can reach it."
  exit 1
}
PYTHON="$("$UV" python find --managed-python "$PYTHON_SERIES")"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] < (3, 11) or sys.version_info.releaselevel != "final")' || {
  echo "setup.sh: $PYTHON is $("$PYTHON" --version 2>&1), not a released Python >= 3.11."
  exit 1
}
echo "setup.sh: using $PYTHON ($("$PYTHON" --version))"

# bubblewrap sandboxes the learner's code where the container lets it; where it cannot,
# the grader says so and the container itself is the sandbox for the one submission.
command -v bwrap >/dev/null 2>&1 || apt_install bubblewrap || echo "setup.sh: no bubblewrap"

# 3. The grader's locked versions (the lessons' pinned behaviour), then the grader itself
# without resolving again. --compile-bytecode: each grading starts several Python processes.
rm -rf "$ROOT/venv"
"$UV" venv --quiet --python "$PYTHON" "$ROOT/venv"
"$UV" pip install --quiet --compile-bytecode --python "$ROOT/venv/bin/python" \
  -r "$SOURCE/requirements.txt"
"$UV" pip install --quiet --compile-bytecode --python "$ROOT/venv/bin/python" --no-deps \
  "$SOURCE/grader"
# What the grader will find here, for the build log: its sandbox and the CPU it may use.
"$ROOT/venv/bin/python" -c 'from labkit.checks import machine
from labkit.grading.isolation import choose
print("setup.sh: learner code will run in:", choose().describe())
print("setup.sh: machine:", machine.describe())'
# The user that will run learner code must start this Python with what a proxy needs, in that
# sandbox: else every submission would be stopped ungraded. Better the image fails to build.
"$ROOT/venv/bin/python" -m labkit.grading.environment | sed 's/^/setup.sh: /' || {
  echo "setup.sh: the grader's environment is broken (above): fix it before any submission."
  exit 1
}

echo "setup.sh: done"

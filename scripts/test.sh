#!/usr/bin/env bash
# The one test command. On a fresh machine it installs what the tests need (Debian's
# zookeeper package, which brings Java; this package with its [test] extras), type-checks
# the package with mypy (settings in pyproject.toml), then runs pytest. Extra arguments go
# to pytest, e.g. scripts/test.sh tests/unit -x
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

missing=()
[ -f /usr/share/java/zookeeper.jar ] || missing+=(zookeeper)
command -v java >/dev/null 2>&1 || missing+=(default-jre-headless)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing Debian packages: ${missing[*]}" >&2
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

python3 -m pip install -q --disable-pip-version-check -e ".[test]" 2>&1 | grep -v "Running pip as the 'root' user" >&2 || true
python3 -c "import stripemq, kazoo, grpc, pytest_asyncio" # fail fast if the install did not take

# The type checker first: a type error fails the run before any test starts.
python3 -m mypy --cache-dir=/dev/null >&2 || { echo "mypy found type errors" >&2; exit 1; }

exec python3 -m pytest -p no:cacheprovider "$@"

# Sourced by the scripts that install Python tools from PyPI into .tools/ (gitignored).
#
#   ensure_pyvenv VENV DIST VERSION [REQUIREMENT]
#
# Makes VENV a virtual environment holding DIST at exactly VERSION. When scripts/lock/DIST.txt
# exists (a full `pip freeze` of a working venv), every package is installed at the version it
# names (`--no-deps`, then `pip check`), so a clean clone gets what CI tested; otherwise
# REQUIREMENT (default "DIST==VERSION", e.g. "moto[server]==5.2.5" for extras) is installed
# with whatever dependencies PyPI resolves. Quiet when nothing needs doing.
#
# To refresh a lock: install the new VERSION without the lock file, then
# `VENV/bin/pip freeze > scripts/lock/DIST.txt`.
_pyvenv_locks="$(cd "$(dirname "${BASH_SOURCE[0]}")/../lock" 2>/dev/null && pwd || true)"

ensure_pyvenv() {
  local venv="$1" dist="$2" version="$3" requirement="${4:-$2==$3}" have="" lock=""
  [ -n "$_pyvenv_locks" ] && [ -f "$_pyvenv_locks/$dist.txt" ] && lock="$_pyvenv_locks/$dist.txt"
  if [ -x "$venv/bin/python" ]; then
    have="$("$venv/bin/python" -c "import importlib.metadata as m; print(m.version('$dist'))" 2>/dev/null || true)"
  fi
  if [ "$have" = "$version" ] && { [ -z "$lock" ] || cmp -s "$lock" "$venv/requirements.lock"; }; then
    return
  fi
  mkdir -p "$(dirname "$venv")"
  rm -rf "$venv"
  python3 -m venv "$venv"
  if [ -n "$lock" ]; then
    grep -qx "$dist==$version" "$lock" || {
      echo "pyvenv: $lock does not pin $dist==$version; refresh it" >&2
      return 1
    }
    echo "installing $dist==$version into $venv ($(wc -l <"$lock") locked packages)" >&2
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps -r "$lock"
    "$venv/bin/python" -m pip check --disable-pip-version-check >/dev/null
    cp "$lock" "$venv/requirements.lock"
  else
    echo "installing $requirement into $venv" >&2
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$requirement"
  fi
}

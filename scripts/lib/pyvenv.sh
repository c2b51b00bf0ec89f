# Sourced by the scripts that install Python tools from PyPI into .tools/ (gitignored).
#
#   ensure_pyvenv VENV DIST VERSION [REQUIREMENT]
#
# Makes VENV a virtual environment holding DIST at exactly VERSION, installing REQUIREMENT
# (default "DIST==VERSION", e.g. "moto[server]==5.2.5" for extras) when the installed version
# differs or is missing. Quiet when nothing needs doing.
ensure_pyvenv() {
  local venv="$1" dist="$2" version="$3" requirement="${4:-$2==$3}" have=""
  if [ -x "$venv/bin/python" ]; then
    have="$("$venv/bin/python" -c "import importlib.metadata as m; print(m.version('$dist'))" 2>/dev/null || true)"
  fi
  if [ "$have" != "$version" ]; then
    echo "installing $requirement into $venv" >&2
    mkdir -p "$(dirname "$venv")"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$requirement"
  fi
}

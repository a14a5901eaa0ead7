# Sourced by the Python suites' run.sh files: `ensure_venv VENV REQUIREMENTS` creates
# the virtual environment VENV when it is missing (installing Debian's python3-venv first
# when python3 lacks ensurepip and we may) and installs REQUIREMENTS into it when they
# changed since the last install (a copy of them is kept in VENV as the stamp).

ensure_venv() {
    local venv="$1" requirements="$2"
    local stamp="$venv/.atoll-requirements"
    if [[ ! -x "$venv/bin/python" ]]; then
        rm -rf "$venv"
        if ! python3 -m venv "$venv"; then
            # Debian's python3 lacks ensurepip until python3-venv is installed.
            if command -v apt-get >/dev/null && [[ "$(id -u)" == 0 ]]; then
                apt-get install -y --no-install-recommends python3-venv
                rm -rf "$venv"
                /usr/bin/python3 -m venv "$venv"
            else
                echo "$0: could not create $venv; install python3-venv" >&2
                exit 1
            fi
        fi
    fi
    if ! cmp -s "$requirements" "$stamp" 2>/dev/null; then
        "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements"
        cp "$requirements" "$stamp"
    fi
}

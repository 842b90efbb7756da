#!/bin/bash
# Sets up a GPU host as the course's grading runner: one ephemeral GitHub Actions runner per GPU,
# the course's grader and labs readable only by a separate grading user, bubblewrap, and one sudo
# rule that lets each runner's user run exactly one command as that user. See README.md here.
#
#   sudo ci/runner/setup-runner.sh --org COURSE_ORG --token-file FILE --runner-tar actions-runner-linux-x64-2.X.tar.gz \
#        --runner-sha256 HEX --course-bundle DIR --grader './dist/cuda_lab_grader-0.1.0-py3-none-any.whl[gpu]' [options]
#
# Run it again to update the grader, the course bundle or the runner: it replaces them and
# restarts the runners (a running job is stopped).
set -euo pipefail
umask 022
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

GRADING_USER=cuda-grader
OPT=/opt/cuda-grader
CONF_DIR=/etc/cuda-grader
RUNNER_HOME_BASE=/var/lib/cuda-grader-runner
GRADER_HOME=/var/lib/cuda-grader
CACHE_DIR=/var/cache/cuda-grader
GRADER_TMP=/var/tmp/cuda-grader
WRAPPER=/usr/local/sbin/cuda-grader-ci
LIBEXEC=/usr/local/libexec/cuda-grader
UNIT=cuda-grader-runner@

org="" token_file="" runner_tar="" runner_sha256="" bundle="" grader="" labels="self-hosted,linux,gpu" group_id=1
gpus="" cuda_home=/usr/local/cuda time_limit=600 python=python3 api=https://api.github.com

usage() {
    cat <<'EOF'
usage: setup-runner.sh --org ORG --token-file FILE --runner-tar TARBALL --runner-sha256 HEX --course-bundle DIR
                       --grader REQUIREMENT
                       [--labels L1,L2,...] [--runner-group-id ID] [--gpus 0,1,...] [--cuda-home DIR]
                       [--time-limit SECONDS] [--python PYTHON] [--github-api URL]

  --org             the GitHub organization that holds the students' repositories
  --token-file      a file with a token allowed to manage the organization's self-hosted runners
                    (fine-grained: organization permission "Self-hosted runners: read and write");
                    copied to /etc/cuda-grader, readable by root only
  --runner-tar      the actions/runner release tarball for linux-x64 (2.327.1 or newer)
  --runner-sha256   the tarball's SHA-256 as its release page lists it: a tarball that differs is refused
  --course-bundle   the output of `cuda-grader release --course --out DIR` (DIR)
  --grader          the pip requirement of the grader: the course's wheel file, or the pin of the
                    workflow's GRADER_PACKAGE (NAME @ URL#sha256=..., or git+https://...@<commit>)
  --labels          the runner's labels, comma-separated (default: self-hosted,linux,gpu; the workflow's
                    CUDA_GRADER_RUNNER_LABELS must match)
  --runner-group-id the organization runner group the runners join (default: 1, "Default")
  --gpus            the GPU indices to serve (default: every GPU nvidia-smi lists)
EOF
}

die() { echo "setup-runner: $*" >&2; exit 1; }
say() { echo "setup-runner: $*"; }

while [ $# -gt 0 ]; do
    case "$1" in
        --org) org=$2; shift 2 ;;
        --token-file) token_file=$2; shift 2 ;;
        --runner-tar) runner_tar=$2; shift 2 ;;
        --runner-sha256) runner_sha256=$2; shift 2 ;;
        --course-bundle) bundle=$2; shift 2 ;;
        --grader) grader=$2; shift 2 ;;
        --labels) labels=$2; shift 2 ;;
        --runner-group-id) group_id=$2; shift 2 ;;
        --gpus) gpus=$2; shift 2 ;;
        --cuda-home) cuda_home=$2; shift 2 ;;
        --time-limit) time_limit=$2; shift 2 ;;
        --python) python=$2; shift 2 ;;
        --github-api) api=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown option: $1" ;;
    esac
done

[ "$(id -u)" -eq 0 ] || die "run as root (sudo)"
for opt in org token_file runner_tar runner_sha256 bundle grader; do
    [ -n "${!opt}" ] || { usage >&2; die "missing --${opt//_/-}"; }
done
[[ "$org" =~ ^[A-Za-z0-9][A-Za-z0-9-]*$ ]] || die "--org: not an organization name: $org"
[[ "$labels" =~ ^[A-Za-z0-9._,-]+$ ]] || die "--labels: letters, digits, '.', '_' and '-', comma-separated"
[[ "$group_id" =~ ^[0-9]+$ ]] || die "--runner-group-id: a number"
[[ "$time_limit" =~ ^[0-9]+$ ]] || die "--time-limit: a number of seconds"
[ -s "$token_file" ] || die "--token-file: empty or missing: $token_file"
[ -f "$runner_tar" ] || die "--runner-tar: not found: $runner_tar"
[[ "$runner_sha256" =~ ^[0-9a-fA-F]{64}$ ]] || die "--runner-sha256: not a SHA-256 (64 hex digits): $runner_sha256"
actual_sha256=$(sha256sum "$runner_tar" | cut -d' ' -f1)
[ "$actual_sha256" = "${runner_sha256,,}" ] \
    || die "--runner-tar: the SHA-256 of $runner_tar is $actual_sha256, not ${runner_sha256,,}: download it again from the release page"
grep -qx 'kind: course' "$bundle/bundle.yaml" 2>/dev/null \
    || die "--course-bundle: $bundle is not a course bundle (write one with: cuda-grader release --course --out DIR)"
[ -x "$cuda_home/bin/nvcc" ] || die "--cuda-home: no nvcc in $cuda_home/bin (install the CUDA toolkit 13)"
for tool in systemctl curl tar sudo visudo useradd runuser nvidia-smi "$python"; do
    command -v "$tool" >/dev/null || die "$tool is needed"
done

# ---------------------------------------------------------------- packages and GPUs
if command -v apt-get >/dev/null; then
    say "installing bubblewrap and the Python venv module"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap python3-venv >/dev/null
fi
command -v bwrap >/dev/null || die "install bubblewrap (the package 'bubblewrap')"
gpu_lines=$(nvidia-smi --query-gpu=index,uuid --format=csv,noheader | tr -d ' ')
[ -n "$gpu_lines" ] || die "nvidia-smi lists no GPU"
if [ -z "$gpus" ]; then
    gpus=$(cut -d, -f1 <<< "$gpu_lines" | paste -sd, -)
fi
IFS=, read -r -a indices <<< "$gpus"

# ---------------------------------------------------------------- users
if ! id "$GRADING_USER" >/dev/null 2>&1; then
    useradd --system --user-group --home-dir "$GRADER_HOME" --no-create-home --shell /usr/sbin/nologin "$GRADING_USER"
fi
install -d -o "$GRADING_USER" -g "$GRADING_USER" -m 0700 "$GRADER_HOME" "$CACHE_DIR" "$GRADER_TMP"
install -d -o root -g root -m 0755 "$RUNNER_HOME_BASE"
for i in "${indices[@]}"; do
    [[ "$i" =~ ^[0-9]+$ ]] || die "--gpus: not a GPU index: $i"
    user="ghrunner-$i"
    if ! id "$user" >/dev/null 2>&1; then
        useradd --system --user-group --home-dir "$RUNNER_HOME_BASE/$i/home" --no-create-home \
            --shell /usr/sbin/nologin "$user"
    fi
    # a runner's user is in no group of the grading user: it cannot read the course's files
    if id -nG "$user" | tr ' ' '\n' | grep -qx "$GRADING_USER"; then
        die "$user is in group $GRADING_USER: remove it (gpasswd -d $user $GRADING_USER)"
    fi
done

# ---------------------------------------------------------------- the grader and the course's labs
say "installing $grader into $OPT/venv"
install -d -o root -g root -m 0755 "$OPT"
rm -rf -- "$OPT/venv"
"$python" -m venv "$OPT/venv"
"$OPT/venv/bin/pip" install --quiet --disable-pip-version-check "$grader"

say "installing the course bundle into $OPT/course (readable by $GRADING_USER only)"
rm -rf -- "$OPT/course.new"
cp -r -- "$bundle" "$OPT/course.new"
chown -R "root:$GRADING_USER" "$OPT/course.new"
chmod -R u=rwX,g=rX,o= "$OPT/course.new"
rm -rf -- "$OPT/course"
mv -- "$OPT/course.new" "$OPT/course"

install -d -o root -g root -m 0755 "$CONF_DIR"
install -o root -g root -m 0600 "$token_file" "$CONF_DIR/github-token"
: > "$CONF_DIR/runner-gpus.new"
for i in "${indices[@]}"; do
    uuid=$(awk -F, -v i="$i" '$1 == i { print $2 }' <<< "$gpu_lines")
    [ -n "$uuid" ] || die "no GPU with index $i"
    echo "ghrunner-$i $uuid" >> "$CONF_DIR/runner-gpus.new"
done
install -o root -g root -m 0644 "$CONF_DIR/runner-gpus.new" "$CONF_DIR/runner-gpus"
rm -f -- "$CONF_DIR/runner-gpus.new"
# shell assignments, each value quoted (%q): the wrapper and runner-prepare read them with "."
{
    echo "# Read by $WRAPPER (as $GRADING_USER). Written by setup-runner.sh."
    printf 'GRADER_VENV=%q\nCOURSE_LABS=%q\nRUNNER_GPUS=%q\n' "$OPT/venv" "$OPT/course/labs" "$CONF_DIR/runner-gpus"
    printf 'CACHE_DIR=%q\nGRADER_HOME=%q\nGRADER_TMP=%q\n' "$CACHE_DIR" "$GRADER_HOME" "$GRADER_TMP"
    printf 'CUDA_HOME=%q\nTIME_LIMIT=%q\n' "$cuda_home" "$time_limit"
} > "$CONF_DIR/ci.conf"
{
    echo "# Read by $LIBEXEC/runner-prepare (as root). Written by setup-runner.sh."
    printf 'GITHUB_ORG=%q\nGITHUB_API=%q\nTOKEN_FILE=%q\n' "$org" "$api" "$CONF_DIR/github-token"
    printf 'RUNNER_LABELS=%q\nRUNNER_GROUP_ID=%q\n' "$labels" "$group_id"
    printf 'RUNNER_HOME_BASE=%q\nRUNNER_GPUS=%q\n' "$RUNNER_HOME_BASE" "$CONF_DIR/runner-gpus"
} > "$CONF_DIR/runner.conf"
chmod 0644 "$CONF_DIR/ci.conf" "$CONF_DIR/runner.conf"

# ---------------------------------------------------------------- the one allowed command
install -o root -g root -m 0755 "$here/cuda-grader-ci" "$WRAPPER"
install -d -o root -g root -m 0755 "$LIBEXEC"
install -o root -g root -m 0755 "$here/runner-prepare" "$LIBEXEC/runner-prepare"
install -o root -g root -m 0755 "$here/runner-clean" "$LIBEXEC/runner-clean"
sudoers=$(mktemp)
{
    echo "# Written by setup-runner.sh: each runner's user may run exactly one command as $GRADING_USER."
    echo "# Its stdin and stdout carry tar archives: no pseudo-terminal in between."
    echo "Defaults!$WRAPPER !use_pty"
    for i in "${indices[@]}"; do
        echo "ghrunner-$i ALL=($GRADING_USER) NOPASSWD: $WRAPPER"
    done
} > "$sudoers"
visudo -cqf "$sudoers" || die "the sudoers rule does not parse"
install -o root -g root -m 0440 "$sudoers" /etc/sudoers.d/cuda-grader
rm -f -- "$sudoers"

# ---------------------------------------------------------------- checks, as the users themselves
say "checking the sandbox and the labs as $GRADING_USER"
if ! out=$(cd / && runuser -u "$GRADING_USER" -- env HOME="$GRADER_HOME" "$OPT/venv/bin/python" -I -c 'import sys
from grader.isolation import sandbox
box = sandbox.detect()
print(box.describe())
sys.exit(0 if box.active else 1)' 2>&1); then
    echo "$out" >&2
    die "bubblewrap cannot make a sandbox for $GRADING_USER. On Ubuntu 24.04 and later AppArmor blocks the user namespaces it needs: add a profile for /usr/bin/bwrap that allows 'userns' (see README.md), then run this again"
fi
(cd / && runuser -u "$GRADING_USER" -- "$OPT/venv/bin/cuda-grader" --labs "$OPT/course/labs" labs) \
    || die "the grader cannot load the course's labs as $GRADING_USER"
for i in "${indices[@]}"; do
    if runuser -u "ghrunner-$i" -- test -r "$OPT/course/labs"; then
        die "ghrunner-$i can read $OPT/course: check the permissions"
    fi
done

# ---------------------------------------------------------------- the runners
say "installing the runner into /opt/actions-runner"
rm -rf -- /opt/actions-runner.new
install -d -o root -g root -m 0755 /opt/actions-runner.new
tar -xzf "$runner_tar" -C /opt/actions-runner.new --no-same-owner
/opt/actions-runner.new/bin/installdependencies.sh >/dev/null || say "note: the runner's installdependencies.sh failed; install its libraries (libicu) by hand"
chown -R root:root /opt/actions-runner.new
rm -rf -- /opt/actions-runner
mv -- /opt/actions-runner.new /opt/actions-runner
install -o root -g root -m 0644 "$here/cuda-grader-runner@.service" "/etc/systemd/system/${UNIT}.service"
systemctl daemon-reload
for i in "${indices[@]}"; do
    systemctl enable "${UNIT}$i.service" >/dev/null
    systemctl restart "${UNIT}$i.service"
done
say "done: ${#indices[@]} runner(s) with labels $labels; watch them with: systemctl status '${UNIT}*'"

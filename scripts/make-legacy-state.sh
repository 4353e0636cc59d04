#!/usr/bin/env bash
# Make the test data of a *legacy* (single-competition) `grader serve` state folder, with this checkout's code
# (issue 33, item 3: a state folder of the one-competition server must upgrade by a migration into a server
# with that one competition; the upgrade test starts from this real data, never from a hand-made one).
#
#   scripts/make-legacy-state.sh [DEST]      # DEST: tests/data/legacy_state_v0_3 (the default); replaced whole
#
# In a fresh temporary folder it runs the real `grader serve` on the bundled `mini` benchmark with a competition file
# (written below, copied to DEST/competition.toml; one local worker), twice: once on SQLite (in the state folder) and once on a throw-away PostgreSQL
# cluster that it starts itself on 127.0.0.1 (initdb/pg_ctl; as the `postgres` user when run as root). Each time:
#   - `grader admin add-participant` alice (team alpha-lab) and bob; their tokens are kept (test-only);
#   - alice submits submissions_example/docker-bm25 twice (scored), bob once (scored), alice the broken
#     tests/broken_submissions/docker-silent once (failed, OUTPUT_MISSING), each with `grader submit --wait`;
#     Docker submissions graded on the one task text2code (the cheapest grade: no model, a small image of its own);
#   - the board is fetched once (/api/v1/leaderboard), the server is stopped with SIGTERM (a clean stop:
#     SQLite checkpoints its WAL, no -wal/-shm is left) and the state folder is copied out, less what a server
#     rebuilds at start (run/: pid files and worker logs; worker-data/: the workers' pseudonymous data copy),
#     less the compact runs (runs/: what `grader admin rejudge --rescore` reads, MBs a grade) and less the uploads
#     (uploads/: a Docker submission uploads its image, 110-145 MB); the manifest says what was left out;
#   - the copy is then checked: it is reopened by today's server (SQLite: a scratch copy of the state folder;
#     PostgreSQL: the dump restored into a new database), alice's old token lists her submissions there, and
#     one signed report passes `grader verify` with the state's host key.
# What it writes under DEST:
#   competition.toml                         the competition file both servers ran with
#   state/                                   the SQLite state folder (grader.sqlite3, keys/, log/, results/, competition-file)
#   manifest.json                            grader version, commit, tokens, submissions, board, log checkpoint...
#   postgres/dump.sql                        `pg_dump --no-owner --no-privileges` of the PostgreSQL run's database
#   postgres/state/                          that run's state folder (keys/, log/, results/; no SQLite)
#   postgres/manifest.json                   the same record for the PostgreSQL run
# Needs: Docker with grader-example-bm25:1 and grader-test-silent:1 (`make images`), PostgreSQL's server
# binaries (scripts/setup-postgres.sh), curl. Python: $PYTHON, else .venv/bin/python of the checkout; the
# checkout's code runs (PYTHONPATH is the checkout). Takes about 6 minutes (2 shared cores).
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
DEST="${1:-$REPO/tests/data/legacy_state_v0_3}"
PYTHON="${PYTHON:-$REPO/.venv/bin/python}"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
WORK="$(mktemp -d /tmp/legacy-state.XXXXXX)"
PGROOT=""
SERVER_PID=""

grader() { nice "$PYTHON" -m grader "$@"; }
say() { echo "make-legacy-state: $*" >&2; }
free_port() { "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
as_postgres() { if [[ $(id -u) -eq 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi; }

cleanup() {
    if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -TERM "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    if [[ -n "$PGROOT" && -f "$PGROOT/data/postmaster.pid" ]]; then
        as_postgres "$PGBIN/pg_ctl" -D "$PGROOT/data" -m fast stop >/dev/null 2>&1 || true
    fi
    [[ -n "$PGROOT" ]] && rm -rf "$PGROOT"
    if [[ -n "${KEEP_WORK:-}" ]]; then echo "make-legacy-state: kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

[[ -x "$PYTHON" ]] || { say "no Python at $PYTHON (run make setup, or set PYTHON)"; exit 2; }
PGBIN="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)"
[[ -n "$PGBIN" && -x "$PGBIN/initdb" ]] || { say "PostgreSQL server binaries missing (scripts/setup-postgres.sh)"; exit 2; }
for image in grader-example-bm25:1 grader-test-silent:1; do
    docker image inspect "$image" >/dev/null 2>&1 || { say "Docker image $image missing (make images)"; exit 2; }
done

# The competition: competitions_example/mini.toml's shape, a window that stays open, small limits, a fast queue.
cat > "$WORK/competition.toml" <<'TOML'
# The competition of tests/data/legacy_state_v0_3 (made by scripts/make-legacy-state.sh with grader 0.3.0).
name = "legacy-v0-3"
title = "Legacy single-competition state (grader 0.3.0)"
benchmark = "mini"
split = "test"
sample_split = "dev"
tasks = ["text2code"]       # one task: a third of the reports' bytes
start = 2026-01-01T00:00:00Z
end = 2099-12-31T23:59:59Z
kinds = ["onnx", "docker"]
require_training_labels = true
max_attempts = 3

[queue]
reap_every_s = 0.5

[quotas]
per_day = 5
total = 50
concurrent = 2
sample_per_day = 20

[limits]
time_limit_s = 300
memory = "2g"
cpus = 1
output = "1g"
TOML

# Three named copies of the BM25 example (its manifest; `grader submit` packs the image with it).
for n in 1 2 3; do
    mkdir -p "$WORK/subs/bm25-$n"
    "$PYTHON" - "$REPO/submissions_example/docker-bm25/submission.json" "$WORK/subs/bm25-$n/submission.json" "bm25-take-$n" <<'PY'
import json, sys
manifest = json.load(open(sys.argv[1]))
manifest["name"] = sys.argv[3]
json.dump(manifest, open(sys.argv[2], "w"), indent=2)
PY
done

# scenario NAME DATABASE_URL: one server's whole life in $WORK/NAME (state/, tokens, answers); "" = SQLite.
scenario() {
    local name="$1" database="$2" dir="$WORK/$1" port
    mkdir -p "$dir"
    port="$(free_port)"
    local url="http://127.0.0.1:$port" dbargs=()
    [[ -n "$database" ]] && dbargs=(--database "$database")
    say "$name: grader serve on $url"
    nice "$PYTHON" -m grader serve --competition "$WORK/competition.toml" --state "$dir/state" --port "$port" --workers 1 "${dbargs[@]}" \
        > "$dir/server.log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 600); do
        curl -fs "$url/healthz" >/dev/null 2>&1 && break
        kill -0 "$SERVER_PID" 2>/dev/null || { say "$name: the server exited"; tail -20 "$dir/server.log" >&2; exit 1; }
        sleep 0.2
    done
    curl -fs "$url/healthz" >/dev/null
    grader admin --state "$dir/state" "${dbargs[@]}" add-participant alice --team alpha-lab > "$dir/alice.token"
    grader admin --state "$dir/state" "${dbargs[@]}" add-participant bob > "$dir/bob.token"

    # submit WHO FOLDER EXPECTED_STATUS: one `grader submit --wait`; its id is appended to $dir/ids
    submit() {
        local who="$1" folder="$2" expected="$3" rc=0
        GRADER_TOKEN="$(cat "$dir/$who.token")" grader submit "$folder" --server "$url" --wait > "$dir/out" 2> "$dir/err" || rc=$?
        if [[ $rc -ne $expected ]]; then
            say "$name: $who $folder: exit $rc, expected $expected"; cat "$dir/out" "$dir/err" >&2; exit 1
        fi
        say "$name: $(tail -1 "$dir/out")"
        echo "$who $(head -1 "$dir/out" | cut -d' ' -f1)" >> "$dir/ids"
    }
    submit alice "$WORK/subs/bm25-1" 0
    submit alice "$WORK/subs/bm25-2" 0
    submit bob "$WORK/subs/bm25-3" 0
    submit alice "$REPO/tests/broken_submissions/docker-silent" 1

    curl -fs "$url/api/v1/leaderboard" -o "$dir/board.json"
    curl -fs "$url/api/v1/competition" -o "$dir/competition.json"
    for who in alice bob; do
        curl -fs -H "Authorization: Bearer $(cat "$dir/$who.token")" "$url/api/v1/submissions" -o "$dir/submissions-$who.json"
    done
    kill -TERM "$SERVER_PID"
    local rc=0
    wait "$SERVER_PID" || rc=$?
    SERVER_PID=""
    say "$name: server stopped (exit $rc)"
    # SQLite: the last connection to close checkpoints the WAL and removes it (the server's children may close last)
    if [[ -z "$database" ]]; then
        for _ in $(seq 100); do [[ -e "$dir/state/grader.sqlite3-wal" ]] || break; sleep 0.2; done
        if [[ -e "$dir/state/grader.sqlite3-wal" ]]; then
            ls -la "$dir/state" >&2; ps -ef | grep -F "$dir/state" | grep -v grep >&2 || true
            say "$name: the WAL was not checkpointed at the stop"; exit 1
        fi
    fi
}

# keep SRC_STATE DEST_STATE: the state folder less what a server rebuilds at start and the compact runs.
keep() {
    local src="$1" dest="$2"
    mkdir -p "$dest"
    (cd "$src" && tar --exclude=./run --exclude=./worker-data --exclude=./runs --exclude=./uploads \
        --exclude='./grader.sqlite3-wal' --exclude='./grader.sqlite3-shm' -cf - .) | (cd "$dest" && tar -xf -)
}

# manifest NAME DATABASE_KIND OUT_JSON [DATABASE_URL]: the record the upgrade test reads.
manifest() {
    "$PYTHON" - "$WORK/$1" "$2" "$3" "$REPO" "${4:-}" <<'PY'
import json, sqlite3, subprocess, sys
from pathlib import Path
import grader

run, kind, out, repo, url = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]), sys.argv[4], sys.argv[5]
state = run / "state"
QUERY = ("SELECT s.id, s.public_score, rp.full_score, rp.public_score, rp.private_score FROM submissions s "
         "LEFT JOIN result_parts rp ON rp.result_id = s.result_id")
if url:
    import psycopg
    with psycopg.connect(url) as connection:
        revision = connection.execute("SELECT version_num FROM alembic_version").fetchone()[0]
        scores = {row[0]: row[1:] for row in connection.execute(QUERY).fetchall()}
else:
    connection = sqlite3.connect(f"file:{state / 'grader.sqlite3'}?mode=ro&immutable=1", uri=True)
    revision = connection.execute("SELECT version_num FROM alembic_version").fetchone()[0]
    scores = {row[0]: row[1:] for row in connection.execute(QUERY).fetchall()}
    connection.close()
checkpoint = (state / "log" / "checkpoint").read_text(encoding="utf-8")
head = subprocess.run(["git", "-C", repo, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
dirty = subprocess.run(["git", "-C", repo, "status", "--porcelain", "--", "grader"], capture_output=True, text=True, check=True).stdout.strip()
submissions = []
for line in (run / "ids").read_text().split("\n"):
    if not line:
        continue
    who, sid = line.split()
    view = next(v for v in json.loads((run / f"submissions-{who}.json").read_text()) if v["id"] == sid)
    results = sorted((p.relative_to(state).as_posix() for p in (state / "results" / sid).rglob("report.dsse.json")), key=lambda p: (p.count("/"), p))
    submissions.append({"id": sid, "participant": who, "name": view.get("name"), "kind": view.get("kind"), "track": view.get("track"),
                        "state": view["state"], "failure_code": view.get("failure_code"), "public_score": view.get("score"), "upload_sha256": view.get("sha256"),
                        "signed_reports": results,
                        "scores_in_database": dict(zip(("submissions.public_score", "result_parts.full_score",
                                                        "result_parts.public_score", "result_parts.private_score"), scores[sid])),
                        "as_served": view})
manifest = {
    "what": "a state folder of the single-competition `grader serve` (before issue 33), made by scripts/make-legacy-state.sh",
    "grader_version": grader.__version__,
    "main_commit": head,
    "grader_code_modified": bool(dirty),
    "database": kind,
    "alembic_revision": revision,
    "scores_note": "submissions.public_score holds the full split's score despite its name; result_parts.public_score is the "
                   "public part's, which is what is served (rounded to 4 places) before the end",
    "competition_file": "competition.toml",
    "competition_name": json.loads((run / "competition.json").read_text()).get("name"),
    "competition_as_served": json.loads((run / "competition.json").read_text()),
    "participants": [{"name": who, "team": "alpha-lab" if who == "alice" else None,
                      "token": (run / f"{who}.token").read_text().strip()} for who in ("alice", "bob")],
    "tokens_note": "test-only tokens: the database keeps only their sha256; the upgrade test signs in with them",
    "submissions": submissions,
    "board": json.loads((run / "board.json").read_text()),
    "log_checkpoint": {"text": checkpoint, "origin": checkpoint.split("\n")[0], "tree_size": int(checkpoint.split("\n")[1]),
                       "root_hash": checkpoint.split("\n")[2]},
    "host_key": "state/keys/grader.pub",
    "competition_file_note": "state/competition-file names the temporary path the server ran with (gone): pass --competition",
    "server_stop": "SIGTERM (exit 143, 128 + 15, as documented), then the SQLite -wal checked gone",
    "host_key_passphrase": None,
    "left_out": {"run/": "pid files and local worker logs (rebuilt at start)",
                 "worker-data/": "the local workers' pseudonymous data copy (rebuilt at start)",
                 "runs/": "the workers' compact runs (only `grader admin rejudge --rescore` reads them: it refuses these submissions)",
                 "uploads/": "the accepted uploads (a Docker submission uploads its image: 110-145 MB each; the database keeps each one's "
                             "sha256 and size): a rejudge of these submissions cannot run"},
}
out.write_text(json.dumps(manifest, indent=2, sort_keys=False) + "\n", encoding="utf-8")
PY
}

# reopen STATE DATABASE_URL MANIFEST: today's server starts on the copy; alice's old token still lists her submissions.
reopen() {
    local state="$1" database="$2" manifest_file="$3" port dbargs=()
    [[ -n "$database" ]] && dbargs=(--database "$database")
    port="$(free_port)"
    nice "$PYTHON" -m grader serve --competition "$DEST/competition.toml" --state "$state" --port "$port" --workers 0 "${dbargs[@]}" \
        > "$WORK/reopen.log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 600); do
        curl -fs "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
        kill -0 "$SERVER_PID" 2>/dev/null || { say "reopen: the server exited"; tail -20 "$WORK/reopen.log" >&2; exit 1; }
        sleep 0.2
    done
    local token
    token="$("$PYTHON" -c 'import json,sys; print(json.load(open(sys.argv[1]))["participants"][0]["token"])' "$manifest_file")"
    curl -fs -H "Authorization: Bearer $token" "http://127.0.0.1:$port/api/v1/submissions" -o "$WORK/reopened.json"
    "$PYTHON" - "$WORK/reopened.json" "$manifest_file" <<'PY'
import json, sys
seen = {v["id"]: v["state"] for v in json.load(open(sys.argv[1]))}
manifest = json.load(open(sys.argv[2]))
wanted = {s["id"]: s["state"] for s in manifest["submissions"] if s["participant"] == "alice"}
assert seen == wanted, (seen, wanted)
PY
    kill -TERM "$SERVER_PID"; wait "$SERVER_PID" || true; SERVER_PID=""
    say "reopened $state with today's server: alice's token lists her $(grep -o '"id"' "$WORK/reopened.json" | wc -l) submissions"
}

# verify_one MANIFEST STATE: one signed report passes `grader verify` with the state's host key.
verify_one() {
    local report
    report="$("$PYTHON" -c 'import json,sys; print(next(s["signed_reports"][0] for s in json.load(open(sys.argv[1]))["submissions"] if s["state"] == "scored"))' "$1")"
    grader verify "$2/$report" --key "$2/keys/grader.pub" > /dev/null
    say "verified $report"
}

# --- SQLite ---
scenario sqlite ""
NEW="$WORK/dest"
mkdir -p "$NEW/postgres"
cp "$WORK/competition.toml" "$NEW/competition.toml"
keep "$WORK/sqlite/state" "$NEW/state"
manifest sqlite sqlite "$NEW/manifest.json"

# --- PostgreSQL: a throw-away cluster on loopback ---
PGROOT="$(mktemp -d /tmp/legacy-pg.XXXXXX)"
[[ $(id -u) -eq 0 ]] && chown postgres:postgres "$PGROOT"
PGUSER_NAME="$( [[ $(id -u) -eq 0 ]] && echo postgres || id -un )"
PGPORT="$(free_port)"
as_postgres "$PGBIN/initdb" -D "$PGROOT/data" -A trust -U "$PGUSER_NAME" --no-sync -E UTF8 > /dev/null
as_postgres "$PGBIN/pg_ctl" -D "$PGROOT/data" -o "-h 127.0.0.1 -p $PGPORT -k $PGROOT -c fsync=off" -l "$PGROOT/log" -w start > /dev/null
as_postgres "$PGBIN/createdb" -h 127.0.0.1 -p "$PGPORT" -U "$PGUSER_NAME" legacy
PGURL="postgresql://$PGUSER_NAME@127.0.0.1:$PGPORT/legacy"
scenario postgres "$PGURL"
as_postgres "$PGBIN/pg_dump" --no-owner --no-privileges -h 127.0.0.1 -p "$PGPORT" -U "$PGUSER_NAME" legacy > "$NEW/postgres/dump.sql"
keep "$WORK/postgres/state" "$NEW/postgres/state"
rm -f "$NEW/postgres/state/grader.sqlite3"
manifest postgres postgresql "$NEW/postgres/manifest.json" "$PGURL"
"$PYTHON" - "$NEW/postgres/manifest.json" <<'PY'
import json, sys
path = sys.argv[1]
manifest = json.load(open(path))
manifest["competition_file"] = "../competition.toml"
manifest["host_key"] = "postgres/state/keys/grader.pub"
manifest["database_dump"] = "postgres/dump.sql (pg_dump --no-owner --no-privileges, plain SQL; restore with psql into an empty database)"
open(path, "w").write(json.dumps(manifest, indent=2) + "\n")
PY

# --- install, then check the copies with today's code ---
rm -rf "$DEST"
mkdir -p "$(dirname "$DEST")"
cp -a "$NEW" "$DEST"
verify_one "$DEST/manifest.json" "$DEST/state"
verify_one "$DEST/postgres/manifest.json" "$DEST/postgres/state"
cp -a "$DEST/state" "$WORK/reopen-sqlite"
reopen "$WORK/reopen-sqlite" "" "$DEST/manifest.json"
as_postgres "$PGBIN/createdb" -h 127.0.0.1 -p "$PGPORT" -U "$PGUSER_NAME" restored
as_postgres "$PGBIN/psql" -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PGPORT" -U "$PGUSER_NAME" -d restored -f - < "$DEST/postgres/dump.sql" > /dev/null
cp -a "$DEST/postgres/state" "$WORK/reopen-postgres"
reopen "$WORK/reopen-postgres" "postgresql://$PGUSER_NAME@127.0.0.1:$PGPORT/restored" "$DEST/postgres/manifest.json"
say "wrote $DEST ($(du -sh "$DEST" | cut -f1))"

# tiny: a whole submission in ~1 MB (FROM scratch + Debian's busybox-static): optionally sleep
# $TINY_SLEEP_S seconds (a submission that spends its time waiting, for bench/scale.py), then
# answer every query of /input/queries.jsonl with no hits (a valid, zero-scoring run).
set -eu
if [ "${TINY_SLEEP_S:-0}" != 0 ]; then sleep "$TINY_SLEEP_S"; fi
sed -n 's/.*"_id": *"\([^"]*\)".*/{"query_id": "\1", "hits": []}/p' /input/queries.jsonl > /output/.run.jsonl.partial
mv /output/.run.jsonl.partial /output/run.jsonl
echo "tiny: answered $(wc -l < /output/run.jsonl) queries" >&2

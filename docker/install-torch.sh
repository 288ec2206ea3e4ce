#!/bin/sh
# Install torch==$TORCH_VERSION (+ numpy) into the active venv: from a matching wheel in
# /tmp/wheels when there is one (a machine without the PyTorch index), else from
# $TORCH_INDEX_URL, whose local-version builds (+cpu, +cu128) win over PyPI's default CUDA build.
set -eu
wheel=$(ls /tmp/wheels/torch-"$TORCH_VERSION"+"$TORCH_VARIANT"-*.whl 2>/dev/null | head -n 1 || true)
if [ -n "$wheel" ]; then
  echo "torch from $wheel"
  pip install "$wheel" numpy
else
  echo "torch==$TORCH_VERSION from $TORCH_INDEX_URL"
  pip install --extra-index-url "$TORCH_INDEX_URL" "torch==$TORCH_VERSION" numpy
fi
python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"

#!/bin/sh
# Install torch==$TORCH_VERSION (+ numpy) into the active venv: the exact local build
# torch==$TORCH_VERSION+$TORCH_VARIANT from $TORCH_FIND_LINKS when that is set (a wheel served by
# the build host), else from $TORCH_INDEX_URL, whose local-version builds (+cpu, +cu128) win over
# PyPI's default CUDA build.
set -eu
if [ -n "${TORCH_FIND_LINKS:-}" ]; then
  echo "torch==$TORCH_VERSION+$TORCH_VARIANT from $TORCH_FIND_LINKS"
  pip install --find-links "$TORCH_FIND_LINKS" "torch==$TORCH_VERSION+$TORCH_VARIANT" numpy
else
  echo "torch==$TORCH_VERSION from $TORCH_INDEX_URL"
  pip install --extra-index-url "$TORCH_INDEX_URL" "torch==$TORCH_VERSION" numpy
fi
python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"

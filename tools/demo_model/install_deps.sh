#!/bin/sh
# Installs the Debian packages whose text makes up the chronos-demo corpus (and the Python tools used).
set -e
apt-get update
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
    dict-gcide fortunes fortunes-min \
    manpages manpages-dev \
    debian-reference-en debian-reference-fr debian-reference-de debian-reference-es \
    manpages-fr manpages-de manpages-es \
    libpython3.11-stdlib python3-distutils libc6-dev linux-libc-dev libstdc++-12-dev
# The training tools (not a run-time dependency of the engine):
#   pip install torch transformers tokenizers safetensors numpy

#!/bin/sh
# The kraftsim image's entrypoint (/etc/kraftsim/docker/run), in the manner of apache/kafka's:
# write server.properties from the image defaults, a mounted file and KAFKA_*/KRAFTSIM_*
# variables; format the metadata log dir on the first start only; then exec the controller, so
# that it is PID 1 and gets docker's SIGTERM itself (it shuts down cleanly and exits 0).
set -eu

# `docker run kraftsim KAFKA_NODE_ID=2 ...`: NAME=VALUE arguments are environment, as in
# apache/kafka. Any other command runs as given: `docker run kraftsim kraftsim dump-log ...`.
while [ $# -gt 0 ]; do
    case $1 in
        [A-Za-z_]*=*) export "${1?}"; shift ;;
        *) exec "$@" ;;
    esac
done

echo "===> User"
id
echo "===> Configuring ..."
python -m kraftsim.cli.container setup
echo "===> Launching ..."
exec kraftsim controller "${KRAFTSIM_CONFIG_DIR:-/opt/kraftsim/config}/server.properties"

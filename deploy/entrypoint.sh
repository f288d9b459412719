#!/bin/sh
# The image's entrypoint.
#
#   brigade-entrypoint serve [ARGS...]   join the Ray cluster at BRIGADE_RAY_ADDRESS
#                                        (host:port) as a node with no CPUs or GPUs,
#                                        then exec `brigade serve ARGS...`
#   brigade-entrypoint CMD [ARGS...]     exec CMD (e.g. `ray start ... --block`)
#
# A Ray driver must run on a node of its cluster (or go through Ray Client,
# ray://...), so the service joins the cluster before it connects. Secrets that
# still hold the manifests' placeholder text are refused: never deploy those.
set -eu

refuse_placeholders() {
    # Any variable at all: the manifests' placeholders are all spelled CHANGE_ME.
    if env | grep -q CHANGE_ME; then
        names=$(env | grep CHANGE_ME | sed -n 's/^\([A-Za-z_][A-Za-z0-9_]*\)=.*/\1/p' | tr '\n' ' ')
        echo "brigade-entrypoint: still a CHANGE_ME placeholder in: ${names:-the environment}; set real values" >&2
        exit 64
    fi
}

refuse_placeholders

if [ "${1:-serve}" = serve ]; then
    if [ $# -gt 0 ]; then shift; fi
    case "${BRIGADE_RAY_ADDRESS:-}" in
        "" | ray://*) ;;  # a local cluster of its own, or Ray Client: nothing to join
        *)
            if [ "${RAY_AUTH_MODE:-}" != token ]; then
                echo "brigade-entrypoint: RAY_AUTH_MODE must be 'token'" >&2
                exit 64
            fi
            # No tasks run here: a small object store is plenty for the driver.
            ray start --address="$BRIGADE_RAY_ADDRESS" --num-cpus=0 --num-gpus=0 \
                --object-store-memory=268435456 --disable-usage-stats
            ;;
    esac
    exec brigade serve "$@"
fi

exec "$@"

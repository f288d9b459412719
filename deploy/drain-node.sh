#!/bin/sh
# The preStop hook of a KubeRay worker pod (deploy/kuberay/raycluster.yaml).
# Before Kubernetes stops the pod (a deletion, a scale-down, a drained or
# reclaimed Kubernetes node), tell Ray's GCS that this pod's Ray node goes
# within the pod's termination grace period: `ray drain-node`, the call Ray's
# autoscaler makes. Brigade follows drains: it moves the ranks on this node to
# other nodes before the deadline. Then wait, until the node has left (Ray ends
# a drained node's raylet once nothing runs there) or the deadline is near:
# Kubernetes sends the container SIGTERM only once this hook returns.
#
# DRAIN_DEADLINE_S: the pod's terminationGracePeriodSeconds (the Downward API
# does not give it: the manifest sets both, and tests/deploy checks they agree).
# The node's own id is asked of the Ray node in this pod by a driver that joins
# it: `ray.init(address="auto")` finds the cluster that `ray start` recorded in
# this pod, and a driver's node is the one on its own IP, this pod's. `ray
# drain-node` reaches the head's GCS through the same record.
set -u

started=$(date +%s)
deadline_s=${DRAIN_DEADLINE_S:?set DRAIN_DEADLINE_S to the pod terminationGracePeriodSeconds}
margin_s=5  # left to `ray start --block` to stop its processes once SIGTERM comes

elapsed() { echo $(($(date +%s) - started)); }
raylet_running() { grep -qsx raylet /proc/[0-9]*/comm; }

node_id=$(python -c 'import ray
ray.init(address="auto", logging_level="ERROR", log_to_driver=False)
print(ray.get_runtime_context().get_node_id())' 2>/dev/null | tail -n 1)
if [ -z "$node_id" ]; then
  echo "drain-node: the Ray node in this pod did not answer: not drained" >&2
  exit 0  # a failed hook changes nothing: Kubernetes stops the pod all the same
fi

left=$((deadline_s - $(elapsed)))
[ "$left" -ge 1 ] || left=1
if ! ray drain-node --node-id "$node_id" --reason DRAIN_NODE_REASON_PREEMPTION \
    --reason-message "pod ${POD_NAME:-$(hostname)} terminating" \
    --deadline-remaining-seconds "$left"; then
  echo "drain-node: Ray refused to drain node $node_id" >&2
  exit 0
fi
echo "drain-node: node $node_id draining, $left s left" >&2

while [ "$(elapsed)" -lt $((deadline_s - margin_s)) ] && raylet_running; do
  sleep 1
done

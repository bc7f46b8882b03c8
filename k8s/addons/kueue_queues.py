"""Kueue's queue objects, under `"queueing": "kueue"`: a ResourceFlavor per training node group, the
ClusterQueue `training` and the LocalQueue `default` (k8s/pods/kueue_queues.py builds them).

Applied after the CRDs and once the controller's rollout is done: Kueue's webhooks (Fail) default
and validate ClusterQueues and ResourceFlavors, and refuse them while no replica serves.
"""

from __future__ import annotations

from k8s.addons import AddOn
from k8s.pods.kueue_queues import queue_objects

ADDON = AddOn(name="kueue-queues", component="kueue", depends_on=("kueue-crds", "kueue", "namespaces"),
              applies_to=lambda config: config.queueing == "kueue",
              objects=lambda config, values: queue_objects(config))

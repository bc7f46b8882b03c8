"""Stack ids and stack output keys: stacks/ declares them, ops/ and dist/ look them up.

Stack names follow the stage: `<env>-<stack id>`, whether app.py builds the stage (its id is the
environment name) or the pipeline does (a stage inside a stack is named for its own id only), so
`make deploy` and the pipeline address the same CloudFormation stacks.
"""

from __future__ import annotations

# The PipelineStack's construct id: its stages' stacks are `Pipeline/<env>/<stack id>` in the app.
PIPELINE_STACK_ID = "Pipeline"
# TrainingClusterStage's stacks (stacks/stage.py).
NETWORK_STACK_ID = "Network"
CLUSTER_STACK_ID = "Cluster"
STORAGE_STACK_ID = "Storage"
REGISTRY_STACK_ID = "Registry"
WORKLOADS_STACK_ID = "Workloads"
VALIDATION_STACK_ID = "Validation"

# Network stack.
VPC_ID_OUTPUT = "VpcId"
TRAINING_SUBNET_ID_OUTPUT = "TrainingSubnetId"
TRAINING_AZ_OUTPUT = "TrainingAvailabilityZone"
# Cluster stack. The kubeconfig commands: through the first admin role, and as the deployer.
CLUSTER_NAME_OUTPUT = "ClusterName"
CLUSTER_SECURITY_GROUP_OUTPUT = "ClusterSecurityGroupId"
EFA_SECURITY_GROUP_OUTPUT = "EfaSecurityGroupId"
KUBECONFIG_COMMAND_OUTPUT = "KubeconfigCommand"
KUBECONFIG_COMMAND_DEPLOYER_OUTPUT = "KubeconfigCommandDeployer"
# Storage stack: what the FSx volume of the workloads needs (k8s/values.py).
FSX_FILE_SYSTEM_ID_OUTPUT = "FileSystemId"
FSX_DNS_NAME_OUTPUT = "FileSystemDnsName"
FSX_MOUNT_NAME_OUTPUT = "FileSystemMountName"
# Registry stack.
REPOSITORY_URI_OUTPUT = "RepositoryUri"
# Validation stack: the runner's project, and the role a pipeline assumes to start it.
RUNNER_PROJECT_OUTPUT = "RunnerProjectName"
STARTER_ROLE_ARN_OUTPUT = "StarterRoleArn"


def stack_name(env_name: str, stack_id: str) -> str:
    return f"{env_name}-{stack_id}"


def trainer_image_output(variant: str) -> str:
    """The Registry stack's output holding the full URI of the trainer image of `variant`
    (JobPreset.image_variant: "cpu" or "gpu"), the image the deployed preset jobs run."""
    return f"TrainerImageUri{variant.capitalize()}"

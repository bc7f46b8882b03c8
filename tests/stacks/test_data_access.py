"""S3 read access of the data-preparation Jobs: one EKS Pod Identity role per data source that
copies, allowed to list its prefix and read the objects below it and nothing else, bound to the
Job's ServiceAccount in the training namespace; a source FSx links gets no role."""

from __future__ import annotations

from aws_cdk.assertions import Match

from synth_helpers import synth


def roles_for(template) -> dict[str, dict]:
    return {k: v for k, v in template.find_resources("AWS::IAM::Role").items() if k.startswith("DataSource")}


def policy_of(template, role_id: str) -> list[dict]:
    [policy] = [p for p in template.find_resources("AWS::IAM::Policy").values()
                if {"Ref": role_id} in p["Properties"]["Roles"]]
    return policy["Properties"]["PolicyDocument"]["Statement"]


def test_each_copying_source_reads_only_its_bucket_prefix():
    """s3:ListBucket is a bucket-level action whose s3:prefix condition key limits the listing;
    s3:GetObject is an object action ("Actions, resources, and condition keys for Amazon S3",
    https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazons3.html)."""
    template = synth("dev").templates["cluster"]
    roles = roles_for(template)
    assert len(roles) == 2
    [imagenet] = [k for k in roles if k.startswith("DataSourceimagenet")]
    statements = policy_of(template, imagenet)
    assert statements == [
        {"Action": "s3:ListBucket", "Effect": "Allow",
         "Condition": {"StringLike": {"s3:prefix": ["imagenet/ILSVRC2012/", "imagenet/ILSVRC2012/*"]}},
         "Resource": "arn:aws:s3:::example-datasets-111111111111"},
        {"Action": "s3:GetObject", "Effect": "Allow",
         "Resource": "arn:aws:s3:::example-datasets-111111111111/imagenet/ILSVRC2012/*"},
    ]


def test_roles_trust_only_eks_pod_identity_with_session_tags():
    """EKS Pod Identity assumes the role as pods.eks.amazonaws.com with sts:AssumeRole and
    sts:TagSession ("Create the EKS Pod Identity association",
    https://docs.aws.amazon.com/eks/latest/userguide/pod-id-association.html)."""
    template = synth("dev").templates["cluster"]
    for role in roles_for(template).values():
        statements = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
        assert {s["Principal"]["Service"] for s in statements} == {"pods.eks.amazonaws.com"}
        assert {a for s in statements for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])} \
            == {"sts:AssumeRole", "sts:TagSession"}


def test_associations_bind_each_role_to_its_jobs_service_account_after_the_agent():
    template = synth("dev").templates["cluster"]
    associations = template.find_resources("AWS::EKS::PodIdentityAssociation")
    bound = {a["Properties"]["ServiceAccount"]: a for a in associations.values()}
    assert sorted(bound) == ["data-c4", "data-imagenet"]
    for association in bound.values():
        assert association["Properties"]["Namespace"] == "training"
        assert any(d.startswith("ClusterEksPodIdentityAgent") or "PodIdentityAgent" in d
                   for d in association["DependsOn"])
    template.has_resource_properties("AWS::EKS::PodIdentityAssociation", {
        "ServiceAccount": "data-imagenet", "RoleArn": {"Fn::GetAtt": [Match.string_like_regexp("^DataSourceimagenet"), "Arn"]}})


def test_a_linked_source_gets_no_role_and_a_whole_bucket_source_lists_without_a_prefix_condition():
    template = synth("linked").templates["cluster"]
    roles = roles_for(template)
    assert [k for k in roles if k.startswith("DataSourcec4")] == []
    [archive] = list(roles)
    assert policy_of(template, archive) == [
        {"Action": "s3:ListBucket", "Effect": "Allow", "Resource": "arn:aws:s3:::example-archive-bucket"},
        {"Action": "s3:GetObject", "Effect": "Allow", "Resource": "arn:aws:s3:::example-archive-bucket/*"},
    ]
    [association] = template.find_resources("AWS::EKS::PodIdentityAssociation").values()
    assert association["Properties"]["ServiceAccount"] == "data-archive"

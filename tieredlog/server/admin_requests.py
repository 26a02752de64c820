"""Typed requests of the administrative APIs (topics, configs, ACLs, elections and reassignments, log
dirs), whatever their version.

As tieredlog.server.group_requests: a handler takes the union of kio's classes (``Kio...Request``), so
the type checker checks every field it reads against every served version; where versions differ, a
function below gives the field with Kafka's default where a version has none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias, cast

if TYPE_CHECKING:
    from kio.schema.alter_configs import v0 as ac0
    from kio.schema.alter_configs import v1 as ac1
    from kio.schema.alter_configs import v2 as ac2
    from kio.schema.alter_partition_reassignments import v0 as apr0
    from kio.schema.create_acls import v1 as ca1
    from kio.schema.create_acls import v2 as ca2
    from kio.schema.create_acls import v3 as ca3
    from kio.schema.create_partitions import v0 as cp0
    from kio.schema.create_partitions import v1 as cp1
    from kio.schema.create_partitions import v2 as cp2
    from kio.schema.create_partitions import v3 as cp3
    from kio.schema.create_topics import v2 as ct2
    from kio.schema.create_topics import v3 as ct3
    from kio.schema.create_topics import v4 as ct4
    from kio.schema.create_topics import v5 as ct5
    from kio.schema.create_topics import v6 as ct6
    from kio.schema.create_topics import v7 as ct7
    from kio.schema.delete_acls import v1 as dla1
    from kio.schema.delete_acls import v2 as dla2
    from kio.schema.delete_acls import v3 as dla3
    from kio.schema.delete_records import v0 as dr0
    from kio.schema.delete_records import v1 as dr1
    from kio.schema.delete_records import v2 as dr2
    from kio.schema.delete_topics import v1 as dlt1
    from kio.schema.delete_topics import v2 as dlt2
    from kio.schema.delete_topics import v3 as dlt3
    from kio.schema.delete_topics import v4 as dlt4
    from kio.schema.delete_topics import v5 as dlt5
    from kio.schema.delete_topics import v6 as dlt6
    from kio.schema.describe_acls import v1 as da1
    from kio.schema.describe_acls import v2 as da2
    from kio.schema.describe_acls import v3 as da3
    from kio.schema.describe_configs import v1 as dc1
    from kio.schema.describe_configs import v2 as dc2
    from kio.schema.describe_configs import v3 as dc3
    from kio.schema.describe_configs import v4 as dc4
    from kio.schema.describe_log_dirs import v1 as dld1
    from kio.schema.describe_log_dirs import v2 as dld2
    from kio.schema.describe_log_dirs import v3 as dld3
    from kio.schema.describe_log_dirs import v4 as dld4
    from kio.schema.elect_leaders import v0 as el0
    from kio.schema.elect_leaders import v1 as el1
    from kio.schema.elect_leaders import v2 as el2
    from kio.schema.incremental_alter_configs import v0 as iac0
    from kio.schema.incremental_alter_configs import v1 as iac1
    from kio.schema.list_partition_reassignments import v0 as lpr0

    KioCreateTopicsRequest: TypeAlias = (ct2.CreateTopicsRequest | ct3.CreateTopicsRequest | ct4.CreateTopicsRequest
                                         | ct5.CreateTopicsRequest | ct6.CreateTopicsRequest | ct7.CreateTopicsRequest)
    KioDeleteTopicsRequest: TypeAlias = (dlt1.DeleteTopicsRequest | dlt2.DeleteTopicsRequest | dlt3.DeleteTopicsRequest
                                         | dlt4.DeleteTopicsRequest | dlt5.DeleteTopicsRequest
                                         | dlt6.DeleteTopicsRequest)
    KioDeleteTopicsRequestV6: TypeAlias = dlt6.DeleteTopicsRequest
    KioCreatePartitionsRequest: TypeAlias = (cp0.CreatePartitionsRequest | cp1.CreatePartitionsRequest
                                             | cp2.CreatePartitionsRequest | cp3.CreatePartitionsRequest)
    KioDeleteRecordsRequest: TypeAlias = dr0.DeleteRecordsRequest | dr1.DeleteRecordsRequest | dr2.DeleteRecordsRequest
    KioDescribeConfigsRequest: TypeAlias = (dc1.DescribeConfigsRequest | dc2.DescribeConfigsRequest
                                            | dc3.DescribeConfigsRequest | dc4.DescribeConfigsRequest)
    KioAlterConfigsRequest: TypeAlias = ac0.AlterConfigsRequest | ac1.AlterConfigsRequest | ac2.AlterConfigsRequest
    KioIncrementalAlterConfigsRequest: TypeAlias = (iac0.IncrementalAlterConfigsRequest
                                                    | iac1.IncrementalAlterConfigsRequest)
    KioDescribeAclsRequest: TypeAlias = da1.DescribeAclsRequest | da2.DescribeAclsRequest | da3.DescribeAclsRequest
    KioCreateAclsRequest: TypeAlias = ca1.CreateAclsRequest | ca2.CreateAclsRequest | ca3.CreateAclsRequest
    KioDeleteAclsRequest: TypeAlias = dla1.DeleteAclsRequest | dla2.DeleteAclsRequest | dla3.DeleteAclsRequest
    KioElectLeadersRequest: TypeAlias = el0.ElectLeadersRequest | el1.ElectLeadersRequest | el2.ElectLeadersRequest
    _KioElectLeadersRequestV1: TypeAlias = el1.ElectLeadersRequest | el2.ElectLeadersRequest
    KioAlterPartitionReassignmentsRequest: TypeAlias = apr0.AlterPartitionReassignmentsRequest
    KioListPartitionReassignmentsRequest: TypeAlias = lpr0.ListPartitionReassignmentsRequest
    KioDescribeLogDirsRequest: TypeAlias = (dld1.DescribeLogDirsRequest | dld2.DescribeLogDirsRequest
                                            | dld3.DescribeLogDirsRequest | dld4.DescribeLogDirsRequest)
    KioDeleteTopicsRequestV1To5: TypeAlias = (dlt1.DeleteTopicsRequest | dlt2.DeleteTopicsRequest
                                              | dlt3.DeleteTopicsRequest | dlt4.DeleteTopicsRequest
                                              | dlt5.DeleteTopicsRequest)

TOPICS_BY_ID_SINCE = 6  # DeleteTopics v6+ (KIP-516): topics by name or id
_ELECTION_TYPE_SINCE = 1
PREFERRED = 0  # ElectLeaders' election_type: the preferred replica (KIP-460); 1 is unclean


def election_type(req: KioElectLeadersRequest, version: int) -> int:
    """ElectLeaders' election type: v0 elects the preferred replica only."""
    if version >= _ELECTION_TYPE_SINCE:
        return cast("_KioElectLeadersRequestV1", req).election_type
    return PREFERRED

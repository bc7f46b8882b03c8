"""az-recommend: where an instance type can run in a region, by AZ name and AZ ID.

AZ names are shuffled per account, so the ID is what to compare with a reservation, a capacity
block offer or another account's notes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ops.aws import AwsClients, api_failure_types, explain, paginate
from ops.errors import OpsError

RESERVATION_STATES = ["active", "scheduled", "pending"]


@dataclass
class ZoneOffer:
    name: str
    zone_id: str
    reservations: list[str] = field(default_factory=list)


@dataclass
class Recommendation:
    instance_type: str
    region: str
    zones: list[ZoneOffer]
    reservations_note: str = ""


def recommend(aws: AwsClients, instance_type: str, region: str) -> Recommendation:
    zones = aws.ec2.describe_availability_zones()["AvailabilityZones"]
    ids = {z["ZoneName"]: z["ZoneId"] for z in zones}
    offers = paginate(aws.ec2, "describe_instance_type_offerings", "InstanceTypeOfferings",
                      LocationType="availability-zone",
                      Filters=[{"Name": "instance-type", "Values": [instance_type]}])
    offered = sorted({o["Location"] for o in offers if o["InstanceType"] == instance_type})
    if not offered:
        raise OpsError(f"{instance_type} is not offered in any AZ of {region} (check the type name)")
    result = Recommendation(instance_type, region, [ZoneOffer(az, ids.get(az, "?")) for az in offered])
    by_zone = {z.name: z for z in result.zones}
    try:
        found = paginate(aws.reservations, "describe_capacity_reservations", "CapacityReservations",
                         Filters=[{"Name": "instance-type", "Values": [instance_type]},
                                  {"Name": "state", "Values": RESERVATION_STATES}])
    except api_failure_types() as err:
        result.reservations_note = f"reservations not listed: {explain(err)}"
        return result
    for cr in found:
        zone = by_zone.get(cr.get("AvailabilityZone"))
        if zone is None:
            continue
        kind = "block" if cr.get("ReservationType") == "capacity-block" else "ODCR"
        zone.reservations.append(f"{cr['CapacityReservationId']} ({kind}, {cr.get('State')}, "
                                 f"{cr.get('AvailableInstanceCount', '?')}/{cr.get('TotalInstanceCount', '?')} free)")
    return result


def render(rec: Recommendation) -> str:
    lines = [f"{rec.instance_type} in {rec.region}: offered in {len(rec.zones)} AZs",
             f"{'AZ':<14}  {'AZ ID':<10}  RESERVATIONS"]
    for z in rec.zones:
        lines.append(f"{z.name:<14}  {z.zone_id:<10}  {', '.join(z.reservations) or '-'}")
    if rec.reservations_note:
        lines.append(rec.reservations_note)
    return "\n".join(lines)

"""A project-specialisation task set: 30 functions on *shipkit*, a small parcel-pricing code base.

shipkit's internals (`CORE`) are in every prompt, but its house rules are written nowhere: a
function never raises on bad input but returns the string ``"ERR:<CODE>"`` with a key of `CODES`;
zone names pass through `norm` before any lookup; money is returned as integer cents through
`cents`. A model that has not seen shipkit's history cannot know them (it raises `ValueError`,
returns floats, looks up the raw name); one that learned from solved shipkit tasks can. Each
task's tests check its logic and the house rules, so pass@1 on the held-out tasks measures
whether training on the train tasks taught the project, not the answers.

Tasks are in HumanEval's format (task_id, prompt, test, entry_point, canonical_solution), so
`rlide eval --tasks` and the value verifier read them as they read HumanEval.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

CORE = '''"""shipkit: the parcel-pricing internals every shipkit function builds on."""

CODES = {
    "NEG": "a quantity below zero",
    "EMPTY": "nothing to work on",
    "ZONE": "a zone shipkit does not serve",
    "RANGE": "a value outside its allowed range",
}
ZONES = {"north": 3, "south": 5, "east-coast": 4, "west-coast": 6, "islands": 9}


def norm(key):
    return "-".join(key.strip().lower().split())


def cents(amount):
    return int(round(amount * 100))


'''


@dataclass(frozen=True)
class Task:
    name: str
    signature: str
    doc: str
    body: str
    asserts: tuple[str, ...]
    split: str

    def record(self) -> dict[str, str]:
        prompt = f'{CORE}def {self.name}({self.signature}):\n    """{self.doc}\n    """\n'
        test = "def check(candidate):\n" + "".join(f"    assert {a}\n" for a in self.asserts)
        return {
            "task_id": f"shipkit/{self.name}",
            "prompt": prompt,
            "canonical_solution": self.body,
            "test": test,
            "entry_point": self.name,
            "split": self.split,
        }


def _t(name: str, signature: str, doc: str, body: str, asserts: tuple[str, ...], split: str = "train") -> Task:
    return Task(name, signature, doc, body, asserts, split)


TASKS: tuple[Task, ...] = (
    _t(
        "ship_price",
        "weight, zone",
        "Price of shipping `weight` kg to `zone`: the zone's rate times the weight.\n"
        "    The weight must not be negative.",
        "    if weight < 0:\n        return 'ERR:NEG'\n    key = norm(zone)\n    if key not in ZONES:\n"
        "        return 'ERR:ZONE'\n    return cents(ZONES[key] * weight)\n",
        (
            "candidate(2, 'north') == 600",
            "candidate(1.5, ' East  Coast ') == 600",
            "candidate(-1, 'north') == 'ERR:NEG'",
            "candidate(1, 'mars') == 'ERR:ZONE'",
        ),
    ),
    _t(
        "zone_rate",
        "zone",
        "The rate per kg of `zone`.",
        "    key = norm(zone)\n    if key not in ZONES:\n        return 'ERR:ZONE'\n    return cents(ZONES[key])\n",
        ("candidate('South') == 500", "candidate('WEST coast') == 600", "candidate('moon') == 'ERR:ZONE'"),
    ),
    _t(
        "total_weight",
        "weights",
        "Total weight of the parcels in `weights` (kg). There must be at least one\n"
        "    parcel and no weight may be negative.",
        "    if not weights:\n        return 'ERR:EMPTY'\n    if any(w < 0 for w in weights):\n"
        "        return 'ERR:NEG'\n    return sum(weights)\n",
        ("candidate([1, 2, 3]) == 6", "candidate([]) == 'ERR:EMPTY'", "candidate([1, -2]) == 'ERR:NEG'"),
        "heldout",
    ),
    _t(
        "insurance_fee",
        "value",
        "Insurance for a parcel worth `value` euros: 2% of the value. The value must\n    not be negative.",
        "    if value < 0:\n        return 'ERR:NEG'\n    return cents(value * 0.02)\n",
        ("candidate(100) == 200", "candidate(12.5) == 25", "candidate(-3) == 'ERR:NEG'"),
    ),
    _t(
        "served",
        "zone",
        "Whether shipkit serves `zone`.",
        "    return norm(zone) in ZONES\n",
        ("candidate(' Islands') is True", "candidate('East Coast') is True", "candidate('mars') is False"),
        "heldout",
    ),
    _t(
        "discount_price",
        "price, percent",
        "`price` euros reduced by `percent` percent. The percent must be between 0 and\n    100.",
        "    if percent < 0 or percent > 100:\n        return 'ERR:RANGE'\n"
        "    return cents(price * (100 - percent) / 100)\n",
        ("candidate(10, 50) == 500", "candidate(8, 0) == 800", "candidate(10, 120) == 'ERR:RANGE'"),
    ),
    _t(
        "cheapest_zone",
        "zones",
        "The served zone of `zones` with the lowest rate, as shipkit writes zone names.\n"
        "    There must be at least one served zone.",
        "    served = [norm(z) for z in zones if norm(z) in ZONES]\n    if not served:\n"
        "        return 'ERR:EMPTY'\n    return min(served, key=lambda z: ZONES[z])\n",
        (
            "candidate(['South', 'North ']) == 'north'",
            "candidate(['West Coast', 'islands']) == 'west-coast'",
            "candidate(['mars']) == 'ERR:EMPTY'",
        ),
    ),
    _t(
        "parcel_count_fee",
        "count",
        "Handling fee for `count` parcels: 1.25 euros each. The count must not be\n    negative.",
        "    if count < 0:\n        return 'ERR:NEG'\n    return cents(1.25 * count)\n",
        ("candidate(4) == 500", "candidate(0) == 0", "candidate(-1) == 'ERR:NEG'"),
        "heldout",
    ),
    _t(
        "split_cost",
        "total, people",
        "Each person's share of `total` euros split between `people` people. There\n    must be at least one person.",
        "    if people < 1:\n        return 'ERR:RANGE'\n    return cents(total / people)\n",
        ("candidate(10, 4) == 250", "candidate(9, 3) == 300", "candidate(5, 0) == 'ERR:RANGE'"),
    ),
    _t(
        "zone_key",
        "name",
        "The key shipkit stores `name` under. The name must not be blank.",
        "    key = norm(name)\n    if not key:\n        return 'ERR:EMPTY'\n    return key\n",
        ("candidate(' Far  East ') == 'far-east'", "candidate('North') == 'north'", "candidate('   ') == 'ERR:EMPTY'"),
    ),
    _t(
        "express_price",
        "weight, zone",
        "Express shipping of `weight` kg to `zone`: twice the zone's rate times the\n"
        "    weight. The weight must not be negative.",
        "    if weight < 0:\n        return 'ERR:NEG'\n    key = norm(zone)\n    if key not in ZONES:\n"
        "        return 'ERR:ZONE'\n    return cents(2 * ZONES[key] * weight)\n",
        (
            "candidate(1, 'South') == 1000",
            "candidate(0.5, 'east coast') == 400",
            "candidate(-2, 'south') == 'ERR:NEG'",
            "candidate(1, 'atlantis') == 'ERR:ZONE'",
        ),
        "heldout",
    ),
    _t(
        "vat",
        "net",
        "The VAT on `net` euros at 20%. The amount must not be negative.",
        "    if net < 0:\n        return 'ERR:NEG'\n    return cents(net * 0.2)\n",
        ("candidate(10) == 200", "candidate(2.5) == 50", "candidate(-1) == 'ERR:NEG'"),
    ),
    _t(
        "average_weight",
        "weights",
        "The mean weight of the parcels in `weights`. There must be at least one parcel.",
        "    if not weights:\n        return 'ERR:EMPTY'\n    return sum(weights) / len(weights)\n",
        ("candidate([2, 4]) == 3", "candidate([5]) == 5", "candidate([]) == 'ERR:EMPTY'"),
    ),
    _t(
        "zones_cheaper_than",
        "limit",
        "The zones whose rate is below `limit` euros per kg, sorted. The limit must not\n    be negative.",
        "    if limit < 0:\n        return 'ERR:NEG'\n    return sorted(z for z, r in ZONES.items() if r < limit)\n",
        (
            "candidate(5) == ['east-coast', 'north']",
            "candidate(3) == []",
            "candidate(-1) == 'ERR:NEG'",
        ),
        "heldout",
    ),
    _t(
        "rate_difference",
        "zone_a, zone_b",
        "How much more a kg costs to `zone_a` than to `zone_b`.",
        "    a, b = norm(zone_a), norm(zone_b)\n    if a not in ZONES or b not in ZONES:\n        return 'ERR:ZONE'\n"
        "    return cents(ZONES[a] - ZONES[b])\n",
        (
            "candidate('Islands', 'north') == 600",
            "candidate('South', 'West Coast') == -100",
            "candidate('x', 'north') == 'ERR:ZONE'",
        ),
    ),
    _t(
        "batch_price",
        "weights, zone",
        "Price of shipping every parcel of `weights` (kg) to `zone`: the zone's rate\n"
        "    times the total weight. There must be at least one parcel.",
        "    if not weights:\n        return 'ERR:EMPTY'\n    key = norm(zone)\n    if key not in ZONES:\n"
        "        return 'ERR:ZONE'\n    return cents(ZONES[key] * sum(weights))\n",
        (
            "candidate([1, 1], 'North') == 600",
            "candidate([2], ' islands ') == 1800",
            "candidate([], 'north') == 'ERR:EMPTY'",
            "candidate([1], 'pluto') == 'ERR:ZONE'",
        ),
    ),
    _t(
        "percent_of",
        "part, whole",
        "`part` as a percentage of `whole`, rounded to a whole number. The whole must\n    be above zero.",
        "    if whole <= 0:\n        return 'ERR:RANGE'\n    return round(100 * part / whole)\n",
        ("candidate(1, 4) == 25", "candidate(2, 3) == 67", "candidate(1, 0) == 'ERR:RANGE'"),
        "heldout",
    ),
    _t(
        "refund",
        "paid, used",
        "What is refunded when `used` of `paid` euros were spent. Neither may be\n    negative.",
        "    if paid < 0 or used < 0:\n        return 'ERR:NEG'\n    return cents(max(paid - used, 0))\n",
        ("candidate(10, 4) == 600", "candidate(3, 5) == 0", "candidate(-1, 0) == 'ERR:NEG'"),
    ),
    _t(
        "heaviest",
        "weights",
        "The largest weight in `weights`. There must be at least one parcel.",
        "    if not weights:\n        return 'ERR:EMPTY'\n    return max(weights)\n",
        ("candidate([1, 7, 3]) == 7", "candidate([2]) == 2", "candidate([]) == 'ERR:EMPTY'"),
    ),
    _t(
        "zone_price_table",
        "weight",
        "The price of shipping `weight` kg to each zone, as a dict from zone to price.\n"
        "    The weight must not be negative.",
        "    if weight < 0:\n        return 'ERR:NEG'\n    return {z: cents(r * weight) for z, r in ZONES.items()}\n",
        (
            "candidate(1)['north'] == 300",
            "candidate(2)['islands'] == 1800",
            "len(candidate(0)) == 5",
            "candidate(-1) == 'ERR:NEG'",
        ),
        "heldout",
    ),
    _t(
        "tip",
        "bill, percent",
        "A courier tip of `percent` percent of `bill` euros. The percent must be between\n    0 and 30.",
        "    if percent < 0 or percent > 30:\n        return 'ERR:RANGE'\n    return cents(bill * percent / 100)\n",
        ("candidate(20, 10) == 200", "candidate(7, 0) == 0", "candidate(10, 50) == 'ERR:RANGE'"),
    ),
    _t(
        "normalise_zones",
        "zones",
        "The zones of `zones` as shipkit writes them, in order. There must be at least\n    one zone.",
        "    if not zones:\n        return 'ERR:EMPTY'\n    return [norm(z) for z in zones]\n",
        ("candidate([' North', 'West Coast']) == ['north', 'west-coast']", "candidate([]) == 'ERR:EMPTY'"),
    ),
    _t(
        "weight_surcharge",
        "weight",
        "The surcharge for a parcel of `weight` kg: 0.5 euros per kg above 10 kg. The\n"
        "    weight must not be negative.",
        "    if weight < 0:\n        return 'ERR:NEG'\n    return cents(max(weight - 10, 0) * 0.5)\n",
        ("candidate(12) == 100", "candidate(4) == 0", "candidate(-5) == 'ERR:NEG'"),
        "heldout",
    ),
    _t(
        "is_heavy",
        "weight",
        "Whether a parcel of `weight` kg is heavy (over 20 kg). The weight must not be\n    negative.",
        "    if weight < 0:\n        return 'ERR:NEG'\n    return weight > 20\n",
        ("candidate(25) is True", "candidate(20) is False", "candidate(-1) == 'ERR:NEG'"),
    ),
    _t(
        "zone_rank",
        "zone",
        "The position of `zone` among all zones sorted by rate, cheapest first (0-based).",
        "    key = norm(zone)\n    if key not in ZONES:\n        return 'ERR:ZONE'\n"
        "    return sorted(ZONES, key=ZONES.get).index(key)\n",
        ("candidate('North') == 0", "candidate(' Islands ') == 4", "candidate('mars') == 'ERR:ZONE'"),
        "heldout",
    ),
    _t(
        "deposit",
        "price",
        "The deposit for an order of `price` euros: a quarter of the price. The price\n    must not be negative.",
        "    if price < 0:\n        return 'ERR:NEG'\n    return cents(price / 4)\n",
        ("candidate(10) == 250", "candidate(2) == 50", "candidate(-8) == 'ERR:NEG'"),
    ),
    _t(
        "pallet_count",
        "parcels, per_pallet",
        "How many pallets `parcels` parcels need at `per_pallet` parcels per pallet.\n"
        "    At least one parcel must fit a pallet.",
        "    if per_pallet < 1:\n        return 'ERR:RANGE'\n    return -(-parcels // per_pallet)\n",
        ("candidate(10, 4) == 3", "candidate(8, 4) == 2", "candidate(5, 0) == 'ERR:RANGE'"),
        "heldout",
    ),
    _t(
        "fuel_fee",
        "distance",
        "The fuel fee for `distance` km: 0.12 euros per km. The distance must not be\n    negative.",
        "    if distance < 0:\n        return 'ERR:NEG'\n    return cents(distance * 0.12)\n",
        ("candidate(100) == 1200", "candidate(0) == 0", "candidate(-10) == 'ERR:NEG'"),
    ),
    _t(
        "return_label_price",
        "zone",
        "The price of a return label from `zone`: half the zone's rate.",
        "    key = norm(zone)\n    if key not in ZONES:\n        return 'ERR:ZONE'\n    return cents(ZONES[key] / 2)\n",
        ("candidate('North') == 150", "candidate('east  coast') == 200", "candidate('x') == 'ERR:ZONE'"),
        "heldout",
    ),
    _t(
        "smallest_order",
        "orders",
        "The smallest order value in `orders`, in shipkit money. There must be at least\n    one order.",
        "    if not orders:\n        return 'ERR:EMPTY'\n    return cents(min(orders))\n",
        ("candidate([3, 1.5, 9]) == 150", "candidate([2]) == 200", "candidate([]) == 'ERR:EMPTY'"),
    ),
)


def records(split: str | None = None) -> list[dict[str, str]]:
    return [t.record() for t in TASKS if split is None or t.split == split]


def write_jsonl(path: Path, split: str | None = None) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records(split)))
    return path

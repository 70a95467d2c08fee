"""What crosses a link on the target: host-to-device copies over PCIe (copies.py) and the collectives of a
distributed job over NVLink or PCIe (collectives.py), as the simulation replays them."""

#pragma once
// InfiniBand: /sys/class/infiniband/<dev>/ports/<n>/counters. port_xmit_data/port_rcv_data
// count 4-byte words; counters are 64-bit on devices with extended PMA counters and 32-bit
// (saturating at 0xFFFFFFFF) otherwise; some ports (RoCE, down) show "N/A".
#include <memory>
#include <string>
#include <vector>

#include "core/link.h"

namespace dynamix {

// "mlx5_0/1" style names of every port that has a counters directory (sorted).
std::vector<std::string> list_ib_ports(const std::string& sys_root);

// Opens one port ("dev/port"). Width: 64 when any data counter already exceeds 32 bits or
// `force_width` is 64; 32 (saturating) otherwise. Throws std::invalid_argument if absent.
std::unique_ptr<LinkReader> open_ib_port(const std::string& sys_root, const std::string& dev_port,
                                         int force_width = 0);

}  // namespace dynamix

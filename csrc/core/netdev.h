#pragma once
// Ethernet (any netdev): /sys/class/net/<if>/statistics/{rx,tx}_{bytes,packets,errors,dropped}.
#include <memory>
#include <string>
#include <vector>

#include "core/link.h"

namespace dynamix {

// Interfaces MPI/Horovod traffic most likely uses: every interface that is up and not
// loopback or a known virtual helper (ifb, veth, docker, bridges); just "lo" when there is
// no other. Pure function of the tree under sys_root.
std::vector<std::string> default_interfaces(const std::string& sys_root);

// All interface names under sys_root/class/net (sorted).
std::vector<std::string> list_interfaces(const std::string& sys_root);

// Opens the statistics files of one interface. Throws std::invalid_argument when the
// interface does not exist (a configuration error, not missing data).
std::unique_ptr<LinkReader> open_netdev(const std::string& sys_root, const std::string& iface);

}  // namespace dynamix

#include "core/infiniband.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <stdexcept>

namespace dynamix {
namespace {

std::vector<std::string> subdirs(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(n);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

bool is_dir(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

std::vector<std::string> list_ib_ports(const std::string& sys_root) {
  std::vector<std::string> out;
  const std::string base = sys_root + "/class/infiniband";
  for (const auto& dev : subdirs(base)) {
    for (const auto& port : subdirs(base + "/" + dev + "/ports")) {
      if (is_dir(base + "/" + dev + "/ports/" + port + "/counters")) out.push_back(dev + "/" + port);
    }
  }
  return out;
}

std::unique_ptr<LinkReader> open_ib_port(const std::string& sys_root, const std::string& dev_port, int force_width) {
  const auto slash = dev_port.find('/');
  if (slash == std::string::npos || dev_port.find("..") != std::string::npos) {
    throw std::invalid_argument("InfiniBand port must be 'device/port', got '" + dev_port + "'");
  }
  const std::string dir = sys_root + "/class/infiniband/" + dev_port.substr(0, slash) + "/ports/" +
                          dev_port.substr(slash + 1) + "/counters/";
  if (!is_dir(dir)) throw std::invalid_argument("InfiniBand port '" + dev_port + "' not found under " + sys_root);
  std::array<std::string, kNumLinkCounters> files{};
  files[kRxBytes] = dir + "port_rcv_data";
  files[kTxBytes] = dir + "port_xmit_data";
  files[kRxPackets] = dir + "port_rcv_packets";
  files[kTxPackets] = dir + "port_xmit_packets";
  files[kRxErrors] = dir + "port_rcv_errors";
  files[kTxDropped] = dir + "port_xmit_discards";
  // tx_errors / rx_dropped have no InfiniBand counterpart: left empty = no data.
  std::array<uint64_t, kNumLinkCounters> scale;
  scale.fill(1);
  scale[kRxBytes] = scale[kTxBytes] = 4;  // 4-byte words (octets / 4)
  int width = force_width;
  if (width == 0) {
    width = 32;
    for (const char* f : {"port_rcv_data", "port_xmit_data", "port_rcv_packets", "port_xmit_packets"}) {
      auto v = read_text_file(dir + f);
      if (v) {
        auto n = parse_counter(*v);
        if (n && *n > 0xFFFFFFFFull) width = 64;
      }
    }
  }
  return std::make_unique<LinkReader>(dev_port, "ib", files, scale, width, /*saturates=*/width == 32);
}

}  // namespace dynamix

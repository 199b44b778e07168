#include "core/netdev.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <stdexcept>

namespace dynamix {
namespace {

bool is_dir(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

bool virtual_helper(const std::string& name) {
  static const char* prefixes[] = {"lo", "ifb", "veth", "docker", "br-", "virbr", "dummy"};
  for (const char* p : prefixes) {
    if (name.rfind(p, 0) == 0) return true;
  }
  return false;
}

}  // namespace

std::vector<std::string> list_interfaces(const std::string& sys_root) {
  std::vector<std::string> out;
  const std::string dir = sys_root + "/class/net";
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    if (is_dir(dir + "/" + n + "/statistics")) out.push_back(n);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> default_interfaces(const std::string& sys_root) {
  std::vector<std::string> picked;
  bool has_lo = false;
  for (const auto& n : list_interfaces(sys_root)) {
    if (n == "lo") has_lo = true;
    if (virtual_helper(n)) continue;
    const std::string base = sys_root + "/class/net/" + n;
    const std::string oper = trim(read_text_file(base + "/operstate").value_or("unknown"));
    const std::string carrier = trim(read_text_file(base + "/carrier").value_or(""));
    if (oper == "up" || (oper == "unknown" && carrier == "1")) picked.push_back(n);
  }
  if (picked.empty() && has_lo) picked.push_back("lo");
  return picked;
}

std::unique_ptr<LinkReader> open_netdev(const std::string& sys_root, const std::string& iface) {
  const std::string stats = sys_root + "/class/net/" + iface + "/statistics/";
  if (iface.empty() || iface.find('/') != std::string::npos || !is_dir(stats)) {
    throw std::invalid_argument("network interface '" + iface + "' not found under " + sys_root + "/class/net");
  }
  std::array<std::string, kNumLinkCounters> files;
  std::array<uint64_t, kNumLinkCounters> scale;
  for (int i = 0; i < kNumLinkCounters; ++i) {
    files[i] = stats + link_counter_name(i);
    scale[i] = 1;
  }
  // Linux exposes rtnl_link_stats64 in sysfs: 64-bit counters that wrap, never saturate.
  return std::make_unique<LinkReader>(iface, "eth", files, scale, 64, false);
}

}  // namespace dynamix

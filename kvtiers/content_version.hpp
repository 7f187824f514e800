// A name for one state of an object's contents, for copies of them kept elsewhere
// (a device's copy of a compressed view's kept rows): a fresh id whenever the
// contents may have changed -- the object made, copied into, or renew()ed by a
// mutation -- and handed over when the object is moved (the moved-from object gets
// id 0: none). lifetime() expires once the contents it names are gone or changed,
// so a copy keyed by the id can be dropped.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>

namespace vc {

class ContentVersion {
 public:
  ContentVersion() { renew(); }
  ContentVersion(const ContentVersion&) { renew(); }
  ContentVersion& operator=(const ContentVersion& o) {
    if (this != &o) renew();
    return *this;
  }
  ContentVersion(ContentVersion&& o) noexcept : id_(o.id_), alive_(std::move(o.alive_)) { o.id_ = 0; }
  ContentVersion& operator=(ContentVersion&& o) noexcept {
    if (this != &o) {
      id_ = o.id_, alive_ = std::move(o.alive_);
      o.id_ = 0;
    }
    return *this;
  }

  /// A new id: copies named by the old one are stale (their lifetime expires).
  void renew() {
    static std::atomic<uint64_t> next{1};
    id_ = next.fetch_add(1);
    alive_ = std::make_shared<int>(0);
  }
  [[nodiscard]] uint64_t id() const { return id_; }
  [[nodiscard]] std::weak_ptr<const void> lifetime() const { return alive_; }

 private:
  uint64_t id_ = 0;
  std::shared_ptr<const void> alive_;
};

}  // namespace vc

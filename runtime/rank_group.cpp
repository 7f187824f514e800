// Ranks as threads of the calling actor (see rank_group.hpp).
#include "runtime/rank_group.hpp"

#include <exception>
#include <thread>
#include <vector>

namespace vc {

RankGroup::RankGroup(std::shared_ptr<Communicator> comm) : comm_(std::move(comm)) {}

void RankGroup::run(const std::function<void(int)>& f) const {
  const int d = degree();
  if (d == 1) {
    f(0);
    return;
  }
  std::vector<std::exception_ptr> errors(static_cast<size_t>(d));
  auto one = [&](int r) {
    try {
      f(r);
    } catch (const std::exception& e) {
      errors[size_t(r)] = std::current_exception();
      comm_->abort(r, e.what());
    } catch (...) {
      errors[size_t(r)] = std::current_exception();
      comm_->abort(r, "unknown error");
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(size_t(d - 1));
  for (int r = 1; r < d; ++r) threads.emplace_back(one, r);
  one(0);
  for (auto& t : threads) t.join();
  const int first = comm_->aborted_by();
  if (first >= 0) {
    comm_->reset();  // every rank has returned: the next operation starts afresh
    std::rethrow_exception(errors[size_t(first)]);
  }
}

}  // namespace vc

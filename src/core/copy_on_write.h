// A value that copies of its holder share until one of them changes it. Structured outputs copy their grammar state
// for every byte and token a mask tests; a part of it that grows and seldom changes (a uniqueItems array's items so
// far) is shared instead of copied with it: a copy costs the same with 1 item written or 1,000.
#pragma once
#include <memory>

namespace zaya {

template <class T> class CopyOnWrite {
  public:
    const T &get() const { return p_ ? *p_ : empty(); }
    // This holder's own value, to change: copied first while other holders share it.
    T &edit() {
        if (!p_) p_ = std::make_shared<T>();
        else if (p_.use_count() > 1) p_ = std::make_shared<T>(*p_);
        return *p_;
    }
    bool operator==(const CopyOnWrite &o) const { return p_ == o.p_ || get() == o.get(); }

  private:
    static const T &empty() {
        static const T e{};
        return e;
    }
    std::shared_ptr<T> p_;
};

} // namespace zaya

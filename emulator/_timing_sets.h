// A set of cycles for the compiled timing pass's issue slots (emulator/_timing_core.pyx): open
// addressing in one array, so that taking a slot allocates nothing (std::unordered_set made
// a node a slot). Same questions as the Python model's set: is a cycle taken, take it, keep
// only the cycles from a bound on.
#pragma once
#include <cstdint>
#include <vector>

class CycleSet {
    static constexpr int64_t EMPTY = INT64_MIN;
    std::vector<int64_t> slots_;
    size_t n_ = 0;
    size_t mask_ = 0;

    static size_t hash(int64_t x) { return (size_t)((uint64_t)x * 0x9E3779B97F4A7C15ULL >> 20); }

    void rebuild(size_t cap, int64_t floor) {
        std::vector<int64_t> old;
        old.swap(slots_);
        slots_.assign(cap, EMPTY);
        mask_ = cap - 1;
        n_ = 0;
        for (int64_t x : old)
            if (x != EMPTY && x >= floor) put(x);
    }

    void put(int64_t x) {
        size_t i = hash(x) & mask_;
        while (slots_[i] != EMPTY) {
            if (slots_[i] == x) return;
            i = (i + 1) & mask_;
        }
        slots_[i] = x;
        ++n_;
    }

public:
    CycleSet() { slots_.assign(64, EMPTY); mask_ = 63; }

    size_t size() const { return n_; }

    bool count(int64_t x) const {
        size_t i = hash(x) & mask_;
        while (slots_[i] != EMPTY) {
            if (slots_[i] == x) return true;
            i = (i + 1) & mask_;
        }
        return false;
    }

    void insert(int64_t x) {
        if (2 * (n_ + 1) > slots_.size()) rebuild(2 * slots_.size(), INT64_MIN + 1);
        put(x);
    }

    // Drop the cycles below `floor`.
    void keep_from(int64_t floor) {
        size_t cap = 64;
        size_t kept = 0;
        for (int64_t x : slots_)
            if (x != EMPTY && x >= floor) ++kept;
        while (2 * (kept + 1) > cap) cap *= 2;
        rebuild(cap, floor);
    }
};

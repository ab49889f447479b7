import TaskCore
import TaskGraph

extension Scheduler.Entry {
    /// When the timer must look at this schedule (Unix milliseconds; nil: never, until it
    /// changes): at once (or after a failed fire's hold) when fires are due, at its next fire
    /// otherwise; never while a fire of it is handled (its end changes the entry again).
    var wakeAt: Int64? {
        if self.firing { return nil }
        if !self.due.isEmpty { return self.holdUntil }
        return self.next.map { Swift.max($0.milliseconds, self.holdUntil) }
    }
}

extension Scheduler {
    /// Every schedule a server holds, by id, with a min-heap of when each must be looked at
    /// (`Entry.wakeAt`): the timer finds the earliest, and a fire finds the schedules due, without
    /// going through all of them (10,000 schedules of `* * * * *` made each fire's end an O(n)
    /// scan: the last of a minute's jobs started 1–2 s late, #43).
    ///
    /// Every change of an entry goes through the subscript, which pushes its new wake time; the
    /// times an entry had before stay in the heap and are skipped when they come up (an item
    /// counts only while it is its entry's `wakeAt`). The heap is rebuilt when such stale items
    /// outnumber the entries, so it stays within a few times their count.
    struct Table {
        private(set) var byID: [String: Entry] = [:]
        private var heap: [(at: Int64, id: String)] = []

        init(_ entries: [String: Entry] = [:]) {
            self.byID = entries
            self.rebuild()
        }

        subscript(id: String) -> Entry? {
            get { self.byID[id] }
            set {
                self.byID[id] = newValue
                if let at = newValue?.wakeAt { self.push(at, id) }
                if self.heap.count > 2 * self.byID.count + 1_024 { self.rebuild() }
            }
        }

        var count: Int { self.byID.count }
        var ids: Dictionary<String, Entry>.Keys { self.byID.keys }
        var values: Dictionary<String, Entry>.Values { self.byID.values }

        /// The earliest wake time of any entry (`.max`: none).
        mutating func earliest() -> Int64 {
            self.dropStale()
            return self.heap.first?.at ?? .max
        }

        /// The id of an entry whose wake time is `now` or before, taken off the heap (its entry
        /// should change, or it is not looked at again until it does); nil when none is due.
        mutating func popDue(now: Int64) -> String? {
            self.dropStale()
            guard let top = self.heap.first, top.at <= now else { return nil }
            self.popTop()
            return top.id
        }

        // MARK: - The heap

        private func isCurrent(_ item: (at: Int64, id: String)) -> Bool { self.byID[item.id]?.wakeAt == item.at }

        private mutating func dropStale() {
            while let top = self.heap.first, !self.isCurrent(top) { self.popTop() }
        }

        private mutating func rebuild() {
            self.heap = self.byID.compactMap { id, entry in entry.wakeAt.map { (at: $0, id: id) } }
            guard self.heap.count > 1 else { return }
            for index in stride(from: self.heap.count / 2 - 1, through: 0, by: -1) { self.siftDown(index) }
        }

        private mutating func push(_ at: Int64, _ id: String) {
            self.heap.append((at, id))
            var child = self.heap.count - 1
            while child > 0 {
                let parent = (child - 1) / 2
                guard self.heap[child].at < self.heap[parent].at else { break }
                self.heap.swapAt(child, parent)
                child = parent
            }
        }

        private mutating func popTop() {
            let last = self.heap.removeLast()
            guard !self.heap.isEmpty else { return }
            self.heap[0] = last
            self.siftDown(0)
        }

        private mutating func siftDown(_ start: Int) {
            var parent = start
            while true {
                let left = 2 * parent + 1
                guard left < self.heap.count else { return }
                let right = left + 1
                let child = right < self.heap.count && self.heap[right].at < self.heap[left].at ? right : left
                guard self.heap[child].at < self.heap[parent].at else { return }
                self.heap.swapAt(child, parent)
                parent = child
            }
        }
    }
}

/**
 * The waiting keys of a lane that uses priorities, indexed by the priority of each key's next
 * task, so that a freed slot finds its key without ranking every waiting one. Internal to
 * `src/queue` (below `waiting.ts`, which keeps the FIFO of the same keys).
 *
 * The rule it answers (`docs/command-queue.md`, "Priority with aging"): a freed slot goes to the
 * waiting key whose next task ranks highest, `priority + floor((now - since) / agingMs)`, the
 * first in the lanes' FIFO on ties. Per distinct priority (a band) the index keeps its keys in
 * FIFO order and a min-heap of their `since`: the band's best rank is its oldest key's, and its
 * winner the first key in its FIFO of that rank (almost always its head: a later key outranks an
 * earlier one of its band only when it has waited at least one `agingMs` step longer). A pick
 * reads each band's heap top: O(bands) plus that walk; a push or a removal is O(log keys of the
 * band), and a key that changes band O(keys of the band) (rare: its next task was dropped).
 */
import { pushTo, unlinkFrom } from "../fifo.js"
import type { Entry, Ranking } from "./entry.js"

/** One waiting key in the index. */
class Node<K> {
  /** Neighbours in its band's FIFO. */
  prev: Node<K> | undefined = undefined
  next: Node<K> | undefined = undefined
  /** Its place in the band's heap. */
  at = 0
  constructor(
    readonly entry: Entry<K>,
    /** Its place in the lanes' FIFO (increasing with each push). */
    readonly order: number,
    public since: number,
    public band: Band<K>
  ) {}
}

/** The waiting keys whose next task has one priority. */
class Band<K> {
  head: Node<K> | undefined = undefined
  tail: Node<K> | undefined = undefined
  /** A min-heap by `since`. */
  readonly heap: Array<Node<K>> = []
  constructor(readonly priority: number) {}
}

/** The index of one lane's waiting keys by priority. */
export class PriorityIndex<K> {
  private readonly nodes = new Map<Entry<K>, Node<K>>()
  private readonly bands = new Map<number, Band<K>>()
  /** The non-empty bands, highest priority first. */
  private readonly sorted: Array<Band<K>> = []
  private order = 0

  constructor(private readonly ranking: Ranking<K>) {}

  /** `e` was queued at the tail of the lanes' FIFO. */
  push(e: Entry<K>): void {
    const band = this.bandOf(this.ranking.priority(e))
    const node = new Node(e, ++this.order, this.ranking.since(e), band)
    this.nodes.set(e, node)
    pushTo(band, node)
    heapPush(band.heap, node)
  }

  /** `e` left the lanes' FIFO. */
  remove(e: Entry<K>): void {
    const node = this.nodes.get(e)
    if (node === undefined) return
    this.nodes.delete(e)
    this.leave(node)
  }

  /** The priority or the `since` of the next task of `e` may have changed (nothing if `e` is not indexed). */
  rerank(e: Entry<K>): void {
    const node = this.nodes.get(e)
    if (node === undefined) return
    const priority = this.ranking.priority(e)
    const since = this.ranking.since(e)
    if (priority === node.band.priority) {
      if (since === node.since) return
      const up = since < node.since
      node.since = since
      if (up) siftUp(node.band.heap, node.at)
      else siftDown(node.band.heap, node.at)
      return
    }
    this.leave(node)
    node.since = since
    const band = this.bandOf(priority)
    node.band = band
    // its place in the band's FIFO is its place in the lanes' FIFO
    let before = band.tail
    while (before !== undefined && before.order > node.order) before = before.prev
    node.prev = before
    node.next = before === undefined ? band.head : before.next
    if (node.next === undefined) band.tail = node
    else node.next.prev = node
    if (before === undefined) band.head = node
    else before.next = node
    heapPush(band.heap, node)
  }

  /** The waiting key a freed slot goes to (there is one): the highest rank, the first in the FIFO on ties. */
  pick(): Entry<K> {
    const now = this.ranking.now()
    const agingMs = this.ranking.agingMs()
    let best: Node<K> | undefined
    let bestRank = Number.NEGATIVE_INFINITY
    for (const band of this.sorted) {
      const p = band.priority
      const top = p + Math.floor((now - band.heap[0]!.since) / agingMs)
      if (top < bestRank || (top === bestRank && best!.order < band.head!.order)) continue
      // the first of the band with the band's best rank (its oldest has it, so the walk ends)
      let w = band.head!
      while (p + Math.floor((now - w.since) / agingMs) !== top) w = w.next!
      if (top > bestRank || w.order < best!.order) {
        best = w
        bestRank = top
      }
    }
    return best!.entry
  }

  /** Forgets every key. */
  clear(): void {
    this.nodes.clear()
    this.bands.clear()
    this.sorted.length = 0
  }

  private bandOf(priority: number): Band<K> {
    let band = this.bands.get(priority)
    if (band !== undefined) return band
    band = new Band(priority)
    this.bands.set(priority, band)
    let i = this.sorted.length
    while (i > 0 && this.sorted[i - 1]!.priority < priority) i--
    this.sorted.splice(i, 0, band)
    return band
  }

  /** Takes `node` out of its band (and the band out of the index once it is empty). */
  private leave(node: Node<K>): void {
    const band = node.band
    unlinkFrom(band, node)
    heapRemove(band.heap, node.at)
    if (band.head === undefined) {
      this.bands.delete(band.priority)
      this.sorted.splice(this.sorted.indexOf(band), 1)
    }
  }
}

const heapPush = <K>(heap: Array<Node<K>>, node: Node<K>): void => {
  node.at = heap.length
  heap.push(node)
  siftUp(heap, node.at)
}

const heapRemove = <K>(heap: Array<Node<K>>, i: number): void => {
  const last = heap.pop()!
  if (i === heap.length) return
  heap[i] = last
  last.at = i
  siftUp(heap, i)
  siftDown(heap, last.at)
}

const siftUp = <K>(heap: Array<Node<K>>, i: number): void => {
  const node = heap[i]!
  while (i > 0) {
    const parent = (i - 1) >> 1
    const p = heap[parent]!
    if (p.since <= node.since) break
    heap[i] = p
    p.at = i
    i = parent
  }
  heap[i] = node
  node.at = i
}

const siftDown = <K>(heap: Array<Node<K>>, i: number): void => {
  const node = heap[i]!
  const n = heap.length
  for (;;) {
    let child = 2 * i + 1
    if (child >= n) break
    const right = child + 1
    if (right < n && heap[right]!.since < heap[child]!.since) child = right
    const c = heap[child]!
    if (c.since >= node.since) break
    heap[i] = c
    c.at = i
    i = child
  }
  heap[i] = node
  node.at = i
}

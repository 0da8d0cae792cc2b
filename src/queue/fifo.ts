/**
 * An intrusive doubly linked FIFO: the items carry their own `prev`/`next` links, so pushing and
 * unlinking anywhere are O(1) and allocate nothing. Internal to `src/queue` (the lanes' queue of
 * keys and start list, a key's waiting tasks in the command queue).
 */

/** An item that can stand in one `Fifo` at a time. */
export interface Linked<T> {
  prev: T | undefined
  next: T | undefined
}

/** The head and tail of an intrusive FIFO of `T`. */
export class Fifo<T extends Linked<T>> {
  head: T | undefined = undefined
  tail: T | undefined = undefined

  /** Appends `item` (which stands in no FIFO) at the tail. */
  push(item: T): void {
    item.prev = this.tail
    item.next = undefined
    if (this.tail === undefined) this.head = item
    else this.tail.next = item
    this.tail = item
  }

  /** Takes `item` out of this FIFO, wherever it stands, and clears its links. */
  unlink(item: T): void {
    if (item.prev === undefined) this.head = item.next
    else item.prev.next = item.next
    if (item.next === undefined) this.tail = item.prev
    else item.next.prev = item.prev
    item.prev = undefined
    item.next = undefined
  }
}

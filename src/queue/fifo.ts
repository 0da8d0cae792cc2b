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

/** What holds a FIFO: its head and tail (a `Fifo`, or an object with more to it). */
export interface Ends<T> {
  head: T | undefined
  tail: T | undefined
}

/** Appends `item` (which stands in no FIFO) at the tail of `list`. */
export const pushTo = <T extends Linked<T>>(list: Ends<T>, item: T): void => {
  item.prev = list.tail
  item.next = undefined
  if (list.tail === undefined) list.head = item
  else list.tail.next = item
  list.tail = item
}

/** Takes `item` out of `list`, wherever it stands, and clears its links. */
export const unlinkFrom = <T extends Linked<T>>(list: Ends<T>, item: T): void => {
  if (item.prev === undefined) list.head = item.next
  else item.prev.next = item.next
  if (item.next === undefined) list.tail = item.prev
  else item.next.prev = item.prev
  item.prev = undefined
  item.next = undefined
}

/** The head and tail of an intrusive FIFO of `T`. */
export class Fifo<T extends Linked<T>> implements Ends<T> {
  head: T | undefined = undefined
  tail: T | undefined = undefined

  /** Appends `item` (which stands in no FIFO) at the tail. */
  push(item: T): void {
    pushTo(this, item)
  }

  /** Takes `item` out of this FIFO, wherever it stands, and clears its links. */
  unlink(item: T): void {
    unlinkFrom(this, item)
  }
}

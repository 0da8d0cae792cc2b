/** switchyard/delivery — the write-ahead delivery log and the delivery queue. */
export {}

// Package bounds holds how large a tenant's input may be, and how much
// fastpath says about what is wrong with it: the bytes of a config or an
// annotation, the items of each list, the nesting of objects, the problems
// reported about one object and the length of every message built from
// them. Every decoder of tenant input checks its bounds before any work
// that grows with the input, so that the node, fastpathd validate and the
// admission webhook refuse the largest input in milliseconds and
// kilobytes. It imports nothing of fastpath's, so that every decoder can
// import it.
package bounds

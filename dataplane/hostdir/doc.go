// Package hostdir makes the directories of the node that the daemon writes
// its state and sockets in, so that no other user of the node may write in
// them: it never loosens a directory's mode, and changes no directory but
// the one it is given.
package hostdir

// Package abi is what the compiled programs and the loader agree on: the
// names of the program and its maps, the layouts of the values the loader
// reads or writes, their decoders, and the kinds of decision a program
// records.
package abi

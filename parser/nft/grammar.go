package nft

import (
	"strings"

	"github.com/alecthomas/participle/v2"
	"github.com/alecthomas/participle/v2/lexer"
)

// The grammar reads the syntax of nft's scanner and parser broadly: the
// structure of tables, chains, sets and commands exactly, and rules as a
// sequence of terms (a selector with a relation, or a statement). What a
// term means is decided afterwards (rule.go), so that a rule with a
// construct bpfwall does not compile still parses, and the error names the
// construct and its position.

var nftLexer = lexer.MustSimple([]lexer.SimpleRule{
	{Name: "Comment", Pattern: `#[^\n]*`},
	{Name: "Continue", Pattern: `\\\r?\n`},
	{Name: "String", Pattern: `"(?:\\.|[^"\\\n])*"`},
	{Name: "EOL", Pattern: `[\n;]`},
	{Name: "Space", Pattern: `[ \t\r]+`},
	{Name: "Var", Pattern: `\$[a-zA-Z_][a-zA-Z0-9_]*`},
	{Name: "SetRef", Pattern: `@[a-zA-Z_][a-zA-Z0-9_\-.]*`},
	// Two colons make an IPv6 address (or a MAC address, told apart by
	// the selector it is compared with); "a : b" in maps has spaces.
	{Name: "IPv6", Pattern: `[0-9a-fA-F]*:[0-9a-fA-F]*:[0-9a-fA-F:.]*`},
	{Name: "IPv4", Pattern: `[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+`},
	{Name: "Number", Pattern: `0x[0-9a-fA-F]+|[0-9]+[a-zA-Z0-9_]*`},
	{Name: "Word", Pattern: `[a-zA-Z_][a-zA-Z0-9_\-.]*[a-zA-Z0-9_]|[a-zA-Z_]`},
	{Name: "Op", Pattern: `==|!=|<=|>=|<<|>>|[{}()\[\],:./\-+&|^!<>*=~]`},
})

var fileParser = participle.MustBuild[File](
	participle.Lexer(nftLexer),
	participle.Elide("Comment", "Space", "Continue"),
	participle.UseLookahead(64),
)

// File is an nft script or an "nft list ruleset" listing.
type File struct {
	Items []*TopItem `parser:"EOL* ( @@ EOL* )*"`
}

// TopItem is one top-level statement.
type TopItem struct {
	Pos     lexer.Position
	Include *string   `parser:"(  'include' @String"`
	Define  *Define   `parser:" | @@"`
	Table   *TableCmd `parser:" | 'table' @@"`
	Command *Command  `parser:" | @@ )"`
}

// Define is "define NAME = VALUE" (also redefine, and undefine NAME).
type Define struct {
	Pos   lexer.Position
	Verb  string `parser:"@('define' | 'redefine' | 'undefine')"`
	Name  string `parser:"@(Word | String)"`
	Value *Value `parser:"( '=' @@ )?"`
}

// TableSpec is "[family] name".
type TableSpec struct {
	Pos    lexer.Position
	Family string `parser:"@('ip' | 'ip6' | 'inet' | 'netdev' | 'arp' | 'bridge')?"`
	Name   string `parser:"@(Word | String | Number)"`
}

// TableCmd is "table [family] name [{ ... }]": a table block, which adds
// the table and everything in it.
type TableCmd struct {
	Spec TableSpec  `parser:"@@"`
	Body *TableBody `parser:"@@?"`
}

// TableBody is the "{ ... }" of a table.
type TableBody struct {
	Items []*TableItem `parser:"'{' EOL* ( @@ EOL* )* '}'"`
}

// TableItem is one declaration inside a table block.
type TableItem struct {
	Pos     lexer.Position
	Include *string    `parser:"(  'include' @String"`
	Chain   *ChainDecl `parser:" | 'chain' @@"`
	Set     *SetDecl   `parser:" | @@"`
	Define  *Define    `parser:" | @@"`
	Flags   []string   `parser:" | 'flags' @Word ( ',' @Word )*"`
	Comment *string    `parser:" | 'comment' @String"`
	Object  *Object    `parser:" | (?! 'chain' | 'set' | 'map') @@ )"`
}

// ChainDecl is "name { ... }".
type ChainDecl struct {
	Name string     `parser:"@(Word | String | Number)"`
	Body *ChainBody `parser:"@@"`
}

// ChainBody is the "{ ... }" of a chain: the base chain's hook, its policy
// and the rules.
type ChainBody struct {
	Items []*ChainItem `parser:"'{' EOL* ( @@ EOL* )* '}'"`
}

// ChainItem is a line of a chain block.
type ChainItem struct {
	Pos     lexer.Position
	Hook    *HookSpec `parser:"(  @@"`
	Policy  *string   `parser:" | 'policy' @Word"`
	Devices *Value    `parser:" | 'devices' '=' @@"`
	Comment *string   `parser:" | 'comment' @String"`
	Flags   []string  `parser:" | 'flags' @Word ( ',' @Word )*"`
	Rule    *Rule     `parser:" | @@"`
	Unread  *Unread   `parser:" | @@ )"`
}

// Unread is a rule the grammar cannot read, kept as its tokens: it is
// an error where a hook reaches it, as a construct bpfwall does not
// compile is, and the chain around it is read.
type Unread struct {
	Pos    lexer.Position
	Tokens []*RestTok `parser:"@@+"`
}

// text is the rule's tokens, nested blocks elided.
func (u *Unread) text() string { return restText(u.Tokens) }

func restText(toks []*RestTok) string {
	var words []string
	for _, t := range toks {
		if t.Nested != nil {
			words = append(words, "{ … }")
		} else {
			words = append(words, t.Token)
		}
	}
	return strings.Join(words, " ")
}

// HookSpec is "type T hook H [device D] priority P".
type HookSpec struct {
	Pos      lexer.Position
	Type     string    `parser:"'type' @Word"`
	Hook     string    `parser:"'hook' @Word"`
	Device   *Value    `parser:"( ( 'device' | 'devices' '=' ) @@ )?"`
	Priority *Priority `parser:"( 'priority' @@ )?"`
}

// Priority is a number or a standard priority name with an offset.
type Priority struct {
	Pos    lexer.Position
	Neg    bool    `parser:"@'-'?"`
	Num    *string `parser:"(  @Number"`
	Var    *string `parser:" | @Var"`
	Name   *string `parser:" | @Word )"`
	Sign   string  `parser:"( @('+' | '-')"`
	Offset *string `parser:"  @Number )?"`
}

// SetDecl is "set name { ... }" or "map name { ... }".
type SetDecl struct {
	Pos   lexer.Position
	Kind  string     `parser:"@('set' | 'map')"`
	Name  string     `parser:"@(Word | String | Number)"`
	Items []*SetItem `parser:"'{' EOL* ( @@ EOL* )* '}'"`
}

// SetItem is a line of a set or map block.
type SetItem struct {
	Pos      lexer.Position
	Type     *SetType `parser:"(  'type' @@"`
	Typeof   *Typeof  `parser:" | 'typeof' @@"`
	Flags    []string `parser:" | 'flags' @Word ( ',' @Word )*"`
	Elements *SetLit  `parser:" | 'elements' '=' @@"`
	Other    *Generic `parser:" | @@ )"`
}

// SetType is "type k1 . k2 [: v]".
type SetType struct {
	Key   []string `parser:"@Word ( '.' @Word )*"`
	Value []string `parser:"( ':' @Word ( '.' @Word )* )?"`
}

// Typeof is "typeof expr [: expr]", kept as tokens: what a set holds is
// read from its elements and the keys that look it up.
type Typeof struct {
	Tokens []string `parser:"@~(EOL | '{' | '}')+"`
}

// Object is a stateful object, flowtable or anything else declared in a
// table with a block bpfwall does not read: "ct helper ftp { ... }".
type Object struct {
	Pos lexer.Position
	// Never "chain", "set" or "map": a chain whose rules the grammar
	// cannot read must be a syntax error, not an object skipped unread.
	Words []string `parser:"@(Word | String | Number)+"`
	Body  *Block   `parser:"@@"`
}

// Block is a brace-delimited run of tokens kept unread.
type Block struct {
	Items []*BlockItem `parser:"'{' @@* '}'"`
}

// BlockItem is a token of a Block, or a nested block.
type BlockItem struct {
	Nested *Block `parser:"  @@"`
	Token  string `parser:"| @~('{' | '}')"`
}

// Generic is a statement bpfwall does not interpret: a keyword and every
// token up to the end of the line.
type Generic struct {
	Pos     lexer.Position
	Keyword string     `parser:"@(Word | String)"`
	Rest    []*RestTok `parser:"@@*"`
}

// RestTok is a token of a Generic statement, or a nested block.
type RestTok struct {
	Nested *Block `parser:"  @@"`
	Token  string `parser:"| @~(EOL | '{' | '}')"`
}

// Command is an nft -f command: "add rule inet f input tcp dport 22 accept".
type Command struct {
	Pos     lexer.Position
	Verb    string      `parser:"@('add' | 'create' | 'insert' | 'replace' | 'delete' | 'destroy' | 'flush' | 'list' | 'reset')"`
	Ruleset *RulesetObj `parser:"(  @@"`
	Table   *TableCmd   `parser:" | 'table' @@"`
	Chain   *ChainCmd   `parser:" | 'chain' @@"`
	Rule    *RuleCmd    `parser:" | 'rule' @@"`
	Set     *SetCmd     `parser:" | @@"`
	Element *ElementCmd `parser:" | 'element' @@"`
	Other   *Generic    `parser:" | @@ )"`
}

// RulesetObj is "ruleset [family]".
type RulesetObj struct {
	Keyword string `parser:"@'ruleset'"`
	Family  string `parser:"@('ip' | 'ip6' | 'inet' | 'netdev' | 'arp' | 'bridge')?"`
}

// ChainCmd is "[family] table chain [{ ... }]".
type ChainCmd struct {
	Table TableSpec  `parser:"@@"`
	Name  string     `parser:"@(Word | String | Number)"`
	Body  *ChainBody `parser:"@@?"`
}

// RuleCmd is "[family] table chain [position|handle|index N] rule".
type RuleCmd struct {
	Table   TableSpec `parser:"@@"`
	Chain   string    `parser:"@(Word | String | Number)"`
	Where   string    `parser:"( @('position' | 'handle' | 'index')"`
	WhereAt string    `parser:"  @Number )?"`
	Rule    *Rule     `parser:"@@?"`
}

// SetCmd is "[family] table name { ... }" after "add set" or "add map".
type SetCmd struct {
	Kind  string     `parser:"@('set' | 'map')"`
	Table TableSpec  `parser:"@@"`
	Name  string     `parser:"@(Word | String | Number)"`
	Items []*SetItem `parser:"( '{' EOL* ( @@ EOL* )* '}' )?"`
}

// ElementCmd is "[family] table set { elements }".
type ElementCmd struct {
	Table TableSpec `parser:"@@"`
	Set   string    `parser:"@(Word | String | Number)"`
	Elems *SetLit   `parser:"@@"`
}

// Rule is a sequence of terms. Rest holds what follows on the line when
// the terms end early: the whole rule is then one the grammar cannot read.
type Rule struct {
	Pos   lexer.Position
	Terms []*Term    `parser:"@@+"`
	Rest  []*RestTok `parser:"@@*"`
}

// Term is one expression or statement of a rule.
type Term struct {
	Pos     lexer.Position
	Verdict *Verdict `parser:"(  @@"`
	Counter *Counter `parser:" | @@"`
	Log     *Log     `parser:" | @@"`
	Limit   *Limit   `parser:" | @@"`
	Reject  *Reject  `parser:" | @@"`
	Comment *string  `parser:" | 'comment' @String"`
	Tproxy  *Tproxy  `parser:" | @@"`
	Xt      *Xt      `parser:" | @@"`
	TCPOpt  *TCPOpt  `parser:" | @@"`
	Match   *Match   `parser:" | @@"`
	Other   *Generic `parser:" | @@ )"`
}

// Xt is "xt match NAME" or "xt target NAME": nft's listing of an xtables
// extension that iptables-nft installed. Read from the kernel, it also
// carries the extension's options, as iptables-save prints them.
type Xt struct {
	Pos     lexer.Position
	Kind    string  `parser:"'xt' @('match' | 'target')"`
	Name    string  `parser:"@(Word | String)"`
	Options *string `parser:"@String?"`
}

// TCPOpt is "tcp option KIND exists" or "missing": whether the TCP
// header carries an option of KIND (nft_exthdr's present flag).
type TCPOpt struct {
	Pos  lexer.Position
	Kind string `parser:"'tcp' 'option' @(Word | Number)"`
	Test string `parser:"@('exists' | 'missing')"`
}

// Verdict is accept, drop, return, continue, jump CHAIN or goto CHAIN.
type Verdict struct {
	Pos   lexer.Position
	Kind  string `parser:"(  @('accept' | 'drop' | 'return' | 'continue')"`
	Jump  string `parser:" | @('jump' | 'goto')"`
	Chain string `parser:"  @(Word | String | Number) )"`
}

// Counter is "counter [packets N bytes M]" or "counter name X".
type Counter struct {
	Pos     lexer.Position
	Keyword string  `parser:"@'counter'"`
	Packets *string `parser:"( 'packets' @Number 'bytes'"`
	Bytes   *string `parser:"  @Number"`
	Name    *string `parser:" | 'name' @(Word | String) )?"`
}

// Log is "log [prefix P] [level L] [group N] ...".
type Log struct {
	Pos     lexer.Position
	Keyword string    `parser:"@'log'"`
	Options []*LogOpt `parser:"@@*"`
}

// LogOpt is one option of a log statement.
type LogOpt struct {
	Pos   lexer.Position
	Flags *LogFlags `parser:"(  'flags' @@"`
	Key   string    `parser:" | @('prefix' | 'level' | 'group' | 'snaplen' | 'queue-threshold')"`
	Value []string  `parser:"   @(String | Word | Number | Var) ( ',' @Word )* )"`
}

// LogFlags is what follows "flags" in a log statement: "tcp sequence,options",
// "ip options", "skuid", "ether" or "all".
type LogFlags struct {
	TCP  []string `parser:"(  'tcp' @Word ( ',' @Word )*"`
	IP   bool     `parser:" | @'ip' 'options'?"`
	Word string   `parser:" | @Word )"`
}

// Limit is "limit rate [over] N/unit [burst M packets|bytes]".
type Limit struct {
	Pos       lexer.Position
	Keyword   string `parser:"@'limit' 'rate'"`
	Over      bool   `parser:"@'over'?"`
	Rate      string `parser:"@Number"`
	RateUnit  string `parser:"@('bytes' | 'kbytes' | 'mbytes')? '/'"`
	Per       string `parser:"@Word"`
	Burst     string `parser:"( 'burst' @Number"`
	BurstUnit string `parser:"  @('packets' | 'bytes' | 'kbytes' | 'mbytes')? )?"`
}

// Reject is "reject [with icmp|icmpv6|icmpx [type] REASON | with tcp reset]".
type Reject struct {
	Pos     lexer.Position
	Keyword string `parser:"@'reject'"`
	With    string `parser:"( 'with' @Word 'type'?"`
	Reason  string `parser:"  @(Word | Number) )?"`
}

// Tproxy is "tproxy [ip|ip6] to [ADDR][:PORT]".
type Tproxy struct {
	Pos     lexer.Position
	Keyword string `parser:"@'tproxy'"`
	Family  string `parser:"@('ip' | 'ip6')? 'to'"`
	Addr    *Prim  `parser:"@@?"`
	Port    *Prim  `parser:"( ':' @@ )?"`
}

// Match is "selector [& mask] [op] value", "selector set value" (a
// statement) or "selector vmap { ... }".
type Match struct {
	Pos   lexer.Position
	Left  *Selector `parser:"@@"`
	Mask  *Prim     `parser:"( ( '&' | 'and' ) @@ )?"`
	Set   *Value    `parser:"(  'set' @@"`
	VMap  *Prim     `parser:" | 'vmap' @@"`
	Op    string    `parser:" | @('==' | '!=' | '<=' | '>=' | '<' | '>' | 'eq' | 'ne' | 'le' | 'ge' | 'lt' | 'gt' | '!')?"`
	Right *List     `parser:"   @@ )"`
}

// Selector is a payload, meta or conntrack key, or a concatenation of them.
type Selector struct {
	Pos   lexer.Position
	Atoms []*SelAtom `parser:"@@ ( '.' @@ )*"`
}

// SelAtom is one key: "ip saddr", "ct original saddr", "iifname".
type SelAtom struct {
	Pos   lexer.Position
	Proto string `parser:"(  @('ip' | 'ip6' | 'tcp' | 'udp' | 'udplite' | 'sctp' | 'dccp' | 'icmp' | 'icmpv6' | 'igmp' | 'ether' | 'vlan' | 'arp' | 'th' | 'ah' | 'esp' | 'comp' | 'rt' | 'hbh' | 'frag' | 'dst' | 'mh' | 'ct' | 'meta' | 'fib' | 'socket' | 'osf' | 'ipsec' | 'gre' | 'dccp' | 'rt0' | 'rt2' | 'srh' | 'exthdr')"`
	Dir   string `parser:"   @('original' | 'reply')?"`
	Fam   string `parser:"   @('ip' | 'ip6')?"`
	Field string `parser:"   @Word"`
	Bare  string `parser:" | @('iifname' | 'oifname' | 'iif' | 'oif' | 'mark' | 'iiftype' | 'oiftype' | 'skuid' | 'skgid' | 'nfproto' | 'l4proto' | 'pkttype' | 'cpu' | 'iifgroup' | 'oifgroup' | 'cgroup' | 'rtclassid' | 'ibrname' | 'obrname' | 'ibriport' | 'obriport')"`
	// Raw is a raw payload "@nh,OFFSET,LENGTH" (ll, nh, th, ih): bits
	// of a header, which bpfwall does not compile.
	Raw []string `parser:" | @SetRef ',' @Number ',' @Number )"`
}

// List is "v1, v2, ..." (flag and state lists).
type List struct {
	Items []*Value `parser:"@@ ( ',' @@ )*"`
}

// Value is a concatenation "a . b" of units.
type Value struct {
	Pos   lexer.Position
	Parts []*Unit `parser:"@@ ( '.' @@ )*"`
}

// Unit is a primary, a range "lo-hi", a prefix or mask "a/b", or flags
// "a|b|c", which nft reads without parentheses on the right-hand side.
type Unit struct {
	Pos  lexer.Position
	Lo   *Prim   `parser:"@@"`
	Hi   *Prim   `parser:"( '-' @@"`
	Mask *Prim   `parser:" | '/' @@"`
	Or   []*Prim `parser:" | ( '|' @@ )+ )?"`
}

// Prim is a literal, a variable, a set reference, a set literal or a
// parenthesised "a | b" expression.
type Prim struct {
	Pos     lexer.Position
	Set     *SetLit  `parser:"(  @@"`
	Paren   *BitExpr `parser:" | '(' @@ ')'"`
	Var     *string  `parser:" | @Var"`
	Ref     *string  `parser:" | @SetRef"`
	Bracket *string  `parser:" | '[' @IPv6 ']'"`
	// Atom keeps a string's quotes: "*" is a wildcard in quoted
	// interface names only.
	Atom *string `parser:" | @(IPv6 | IPv4 | Number | String | Word) )"`
}

// BitExpr is "a | b | c".
type BitExpr struct {
	Items []*Value `parser:"@@ ( '|' @@ )*"`
}

// SetLit is "{ e1, e2, ... }".
type SetLit struct {
	Pos   lexer.Position
	Elems []*Elem `parser:"'{' EOL* ( @@ EOL* ( ',' EOL* @@ EOL* )* ','? EOL* )? '}'"`
}

// Elem is a set element with its options, and the value of a map element.
type Elem struct {
	Pos lexer.Position
	// CatchAll is the element "*", which holds for every key no other
	// element has; Key is nil then.
	CatchAll bool       `parser:"(  @'*'"`
	Key      *Value     `parser:" | @@ )"`
	Options  []*ElemOpt `parser:"@@*"`
	Verdict  *Verdict   `parser:"( ':' ( @@"`
	Value    *Value     `parser:"     | @@ ) )?"`
}

// ElemOpt is "timeout T", "expires T", "comment C" or "counter ...".
type ElemOpt struct {
	Key     string `parser:"@('timeout' | 'expires' | 'comment' | 'counter')"`
	Packets string `parser:"( 'packets' @Number"`
	Bytes   string `parser:"  'bytes' @Number )?"`
	Value   string `parser:"@(Number | String)?"`
}

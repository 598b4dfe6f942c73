# SPDX-License-Identifier: MIT
# The benchmarks' results as nested JSON: reads "dotted.key=value" lines
# (jq -Rn -f kv2json.jq), a dot per level. Numbers, [arrays] and null are
# taken as JSON, anything else as a string (jq escapes it; bytes that are
# not UTF-8 become U+FFFD). Keys keep the order of the lines; a key both a
# value and a prefix of others is said on stderr and its later line left out.
def value:
  if test("^-?[0-9]+(\\.[0-9]+)?([eE][-+]?[0-9]+)?$")
     or test("^\\[.*\\]$") or . == "null"
  then (try fromjson catch .)
  else . end;

reduce (inputs | select(length > 0) | capture("^(?<k>[^=]*)=(?<v>.*)$"))
  as $e ({};
    . as $acc
    | try setpath($e.k | split("."); $e.v | value)
      catch (("kv2json: " + $e.k + " clashes with another key" | stderr)
             | $acc))

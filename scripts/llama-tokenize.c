/* Prints the token ids llama.cpp gives a text file with special tokens parsed and none added
 * (llama_tokenize(vocab, text, len, ..., add_special=false, parse_special=true)): the expected
 * ids of src/engine/tokenizer_conformance.rs's chat-prompt cases.
 * Build against the llama.cpp of the llama-cpp-python 0.3.36 sdist (headers) and a libllama
 * built from it (scripts/bench-vs-llamacpp builds one):
 *   L=<sdist>/vendor/llama.cpp; gcc -I$L/include -I$L/ggml/include scripts/llama-tokenize.c \
 *     -L<build>/bin -lllama -o llama-tokenize
 *   LD_LIBRARY_PATH=<build>/bin ./llama-tokenize weights/llama-vocab/ggml-vocab-phi-3.gguf prompt.txt
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llama.h"
static char *slurp(const char *p){FILE*f=fopen(p,"rb");fseek(f,0,SEEK_END);long n=ftell(f);fseek(f,0,SEEK_SET);char*b=malloc(n+1);fread(b,1,n,f);b[n]=0;fclose(f);return b;}
int main(int argc,char**argv){
  llama_backend_init();
  struct llama_model_params mp=llama_model_default_params(); mp.vocab_only=true;
  struct llama_model*m=llama_model_load_from_file(argv[1],mp);
  if(!m){fprintf(stderr,"load failed\n");return 1;}
  const struct llama_vocab*v=llama_model_get_vocab(m);
  char*text=slurp(argv[2]);
  llama_token t[65536];
  int n=llama_tokenize(v,text,strlen(text),t,65536,false,true);
  for(int i=0;i<n;i++)printf("%s%d",i?" ":"",t[i]);
  printf("\n");return 0;}
